package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

// paddingDigest is the digest of the attacker's part of paddingFiles
// empty files (emptyFilesPart), which the refusals must name.
var paddingDigest string

const (
	// boundsCap is the nodes' lowered cap on a part's entries.
	boundsCap = 2000
	// paddingFiles is the attacker's part: more entries than boundsCap, and
	// enough that unpacking them all takes seconds.
	paddingFiles = 60_000
)

func TestRunnableBounds(t *testing.T) {
	reg := harness.StartRegistry(t)
	ck := harness.CheckpointOnNode1(t, reg, reg.Addr+"/cryo/app:bounds")
	real := len(harness.ArchiveFiles(t, ck.Archive))
	t.Logf("a real CRI checkpoint of one process holds %d files; cap %d, default %d", real, boundsCap, 100_000)
	if real*10 > boundsCap {
		t.Fatalf("a real checkpoint holds %d files: the test's cap of %d leaves no margin", real, boundsCap)
	}
	repo := "ckpt/bounds"
	builder := harness.NewNode(t, nil)
	harness.WantIn(t, builder.Cryo(t, "image", "build", "--runnable", ck.Archive, reg.Addr+"/"+repo+":v1"), "built")
	genuine := reg.Addr + "/" + repo + "@" + harness.LastLine(builder.Cryo(t, "image", "push", reg.Addr+"/"+repo+":v1"))
	padded := padRunnable(t, reg, repo, strings.TrimPrefix(genuine, reg.Addr+"/"+repo+"@"), paddingFiles)

	// The same attack on the annotation path: a layer added to the CRI
	// checkpoint's image (and to its config's diff_ids).
	plainRepo, plainDigest, _ := strings.Cut(strings.TrimPrefix(ck.Ref, reg.Addr+"/"), "@")
	paddedPlain := padImage(t, reg, plainRepo, plainDigest, paddingFiles, false)
	harness.UsePolicy(t, harness.AllowOnly("default", []string{reg.Addr + "/ckpt/"}, reg.Addr))

	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	restoreDir := filepath.Join(dir, "restore")
	t.Setenv("CRYO_RESTORE_DIR", restoreDir)
	t.Run("Cap", func(t *testing.T) {
		t.Setenv(config.EnvUnpackMaxEntries, fmt.Sprint(boundsCap))
		n := harness.StartCRINodeAt(t, 1)
		n.PullImage(genuine)
		t.Run("GenuineRestores", func(t *testing.T) {
			n := n.With(t)
			p := n.NewPod("bounds-genuine", harness.CRIHandler, nil)
			if err := p.Create(genuine); err != nil {
				t.Fatal(err)
			}
			if err := p.Start(); err != nil {
				t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
			}
			n.AssertContinues(p, ck)
			p.Remove()
			assertNoWorkDirs(t, restoreDir)
		})
		t.Run("TooManyEntriesRefused", func(t *testing.T) {
			// Both images share one config, so one image ID: the node gets
			// the attacker's alone, as a node that never pulled the genuine.
			n := n.With(t)
			n.RemoveImage(genuine)
			n.PullImage(padded)
			took, err := refusedStart(n, "bounds-many", padded, restoreDir, nil)
			for _, want := range []string{fmt.Sprintf("more than %d entries", boundsCap), "checkpoint part " + paddingDigest, config.EnvUnpackMaxEntries,
				"nothing was restored", "its work directory was removed", "remedy:"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal lacks %q: %v", want, err)
				}
			}
			if took > 5*time.Second {
				t.Errorf("StartContainer took %s to refuse the part, want seconds at most", took)
			}
		})
		t.Run("AnnotationTooManyEntriesRefused", func(t *testing.T) {
			_, err := refusedStart(n.With(t), "bounds-ann-many", harness.TestImage, restoreDir, map[string]string{imagerestore.AnnImage: paddedPlain})
			for _, want := range []string{fmt.Sprintf("more than %d entries", boundsCap), "layer " + paddingDigest, config.EnvUnpackMaxEntries,
				"nothing was restored", "remedy:"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal lacks %q: %v", want, err)
				}
			}
		})
	})
	t.Run("Deadline", func(t *testing.T) {
		const limit = time.Second
		t.Setenv(config.EnvRestoreTimeout, limit.String())
		n := harness.StartCRINodeAt(t, 2)
		n.PullImage(padded)
		took, err := refusedStart(n.With(t), "bounds-deadline", padded, restoreDir, nil)
		for _, want := range []string{"deadline passed during the unpack", config.EnvRestoreTimeout, limit.String(),
			"nothing was restored", "its work directory was removed", "--runtime-request-timeout"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the deadline's error lacks %q: %v", want, err)
			}
		}
		if took > limit+8*time.Second {
			t.Errorf("StartContainer returned %s after its start, want about the %s deadline", took, limit)
		}
		t.Run("Annotation", func(t *testing.T) {
			took, err := refusedStart(n.With(t), "bounds-ann-deadline", harness.TestImage, restoreDir, map[string]string{imagerestore.AnnImage: paddedPlain})
			for _, want := range []string{"the restore did not finish within " + limit.String(), config.EnvRestoreTimeout,
				"nothing was restored; nothing of the unpack is left", "--runtime-request-timeout"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the deadline's error lacks %q: %v", want, err)
				}
			}
			if took > limit+8*time.Second {
				t.Errorf("StartContainer returned %s after its start, want about the %s deadline", took, limit)
			}
		})
	})
}

// refusedStart creates a container of image in a new cryo pod and starts
// it, which must fail; the container must not run, and no work directory
// may be left. It returns how long StartContainer took and its error.
func refusedStart(n *harness.CRINode, name, image, restoreDir string, ann map[string]string) (time.Duration, error) {
	t := n.T
	p := n.NewPod(name, harness.CRIHandler, ann)
	defer p.Remove()
	if err := p.Create(image); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err := p.Start()
	took := time.Since(began)
	if err == nil {
		t.Fatalf("StartContainer of %s succeeded", image)
	}
	t.Logf("StartContainer refused after %s: %v", took.Round(time.Millisecond), err)
	if st := p.Status(); st.State == criapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the container runs after its refusal")
	}
	if entries, _ := os.ReadDir(restoreDir); len(entries) > 0 {
		t.Errorf("restore work directories left in %s: %v", restoreDir, entries)
	}
	return took, err
}

// padRunnable pushes, as an attacker may, the runnable image pinned by
// man (in repo of reg) with one more checkpoint part: files empty files,
// whose digests are right, so that only the unpack's bounds stop it. It
// returns the new image's pinned reference.
func padRunnable(t *testing.T, reg *harness.ImgRegistry, repo, man string, files int) string {
	return padImage(t, reg, repo, man, files, true)
}

// padImage is padRunnable for a runnable image (a checkpoint part, with
// a config of its own that names the padded parts, as anyone can compute
// it) or another checkpoint image (a layer, added to the config's
// diff_ids as well).
func padImage(t *testing.T, reg *harness.ImgRegistry, repo, man string, files int, runnable bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), harness.ImgTimeout)
	defer cancel()
	r, err := remote.NewRepository(reg.Addr + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	r.PlainHTTP = true
	var m ocispec.Manifest
	fetchJSON(ctx, t, r, man, &m)
	blob, diffID := emptyFilesPart(t, files)
	layer := content.NewDescriptorFromBytes(ocispec.MediaTypeImageLayerZstd, blob)
	paddingDigest = layer.Digest.String()
	if runnable {
		layer.MediaType = ociimage.MediaTypeCheckpointPart
		layer.Annotations = map[string]string{ociimage.AnnPartDiffID: diffID.String()}
	} else {
		m.Config = pushConfigWith(ctx, t, r, m.Config, diffID)
	}
	push(ctx, t, r, layer, blob)
	m.Layers = append(m.Layers, layer)
	if runnable {
		m.Config = pushConfigLabel(ctx, t, r, m.Config, ociimage.LabelParts, ociimage.PartsDigest(m.Layers, m.Annotations).String())
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, out)
	if err := r.PushReference(ctx, desc, bytes.NewReader(out), "padded"); err != nil {
		t.Fatal(err)
	}
	return reg.Addr + "/" + repo + "@" + desc.Digest.String()
}

// pushConfigWith pushes config with one more diff_id, every other field
// kept as it was.
func pushConfigWith(ctx context.Context, t *testing.T, r *remote.Repository, config ocispec.Descriptor, diffID digest.Digest) ocispec.Descriptor {
	t.Helper()
	var c map[string]any
	fetchBlobJSON(ctx, t, r, config, &c)
	rootfs, _ := c["rootfs"].(map[string]any)
	if rootfs == nil {
		t.Fatalf("config %s has no rootfs", config.Digest)
	}
	ids, _ := rootfs["diff_ids"].([]any)
	rootfs["diff_ids"] = append(ids, diffID.String())
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	d := content.NewDescriptorFromBytes(config.MediaType, out)
	push(ctx, t, r, d, out)
	return d
}

// pushConfigLabel pushes config with label key set to value, every other
// field kept as it was.
func pushConfigLabel(ctx context.Context, t *testing.T, r *remote.Repository, config ocispec.Descriptor, key, value string) ocispec.Descriptor {
	t.Helper()
	var c ocispec.Image
	fetchBlobJSON(ctx, t, r, config, &c)
	if c.Config.Labels == nil {
		c.Config.Labels = map[string]string{}
	}
	c.Config.Labels[key] = value
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	d := content.NewDescriptorFromBytes(config.MediaType, out)
	push(ctx, t, r, d, out)
	return d
}

// fetchBlobJSON decodes the blob of d in r into v.
func fetchBlobJSON(ctx context.Context, t *testing.T, r *remote.Repository, d ocispec.Descriptor, v any) {
	t.Helper()
	rc, err := r.Fetch(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := json.NewDecoder(rc).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func fetchJSON(ctx context.Context, t *testing.T, r *remote.Repository, ref string, v any) {
	t.Helper()
	_, rc, err := r.FetchReference(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := json.NewDecoder(rc).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func push(ctx context.Context, t *testing.T, r *remote.Repository, d ocispec.Descriptor, data []byte) {
	t.Helper()
	if err := r.Push(ctx, d, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// emptyFilesPart is a zstd tar of n empty files, and its uncompressed
// digest.
func emptyFilesPart(t *testing.T, n int) ([]byte, digest.Digest) {
	t.Helper()
	var blob bytes.Buffer
	zw, err := zstd.NewWriter(&blob)
	if err != nil {
		t.Fatal(err)
	}
	plain := digest.SHA256.Digester()
	tw := tar.NewWriter(io.MultiWriter(zw, plain.Hash()))
	for i := 0; i < n; i++ {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("padding/f%d", i), Typeflag: tar.TypeReg, Mode: 0o600}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return blob.Bytes(), plain.Digest()
}
