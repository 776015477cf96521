package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// unpackDeadline is the test's CRYO_RESTORE_TIMEOUT, and unpackPadding the
// empty files added to the checkpoint: their unpack by containerd takes
// several times as long on this machine.
const (
	unpackDeadline = time.Second
	unpackPadding  = 60_000
)

func TestRestoreDeadlineUnpack(t *testing.T) {
	harness.RequireRoot(t)
	t.Cleanup(removeNamespaceDirs)
	t.Setenv(config.EnvRestoreTimeout, unpackDeadline.String())
	d := harness.StartDaemon(t, harness.CtrdVersions[1])
	d.ImportTestImage()
	d.RunApp("du")
	ref, _ := d.TaskCheckpoint("du")
	d.Remove("du")
	padded := padCheckpoint(t, d, ref, unpackPadding)

	ctx, cancel := context.WithTimeout(harness.NamespacedCtx(), 2*time.Minute)
	defer cancel()
	ckpt, err := d.Client.GetImage(ctx, padded)
	if err != nil {
		t.Fatal(err)
	}
	id := "du-padded"
	t.Cleanup(func() { scrubContainer(id) })
	start := time.Now()
	task, err := d.NewContainer(id).NewTask(ctx, cio.LogFile(d.LogPath(id)), client.WithTaskCheckpoint(ckpt))
	took := time.Since(start)
	if err == nil {
		_, _ = task.Delete(ctx, client.WithProcessKill)
		t.Fatalf("the restore of a checkpoint whose unpack took %s passed Create under a %s deadline", took, unpackDeadline)
	}
	t.Logf("Create failed after %s (containerd's unpack included): %v", took.Round(time.Millisecond), err)
	for _, w := range []string{"its deadline passed during the unpack of the checkpoint by containerd", config.EnvRestoreTimeout, "nothing was restored", "remedy:"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal lacks %q", w)
		}
	}
	if took < unpackDeadline {
		t.Errorf("Create failed after %s, before the deadline of %s: the unpack was not slow enough to show anything", took, unpackDeadline)
	}
	if strings.Contains(harness.LastLines(d.Log(), 200), "runc restore") {
		t.Errorf("runc restore ran after the deadline had passed")
	}
	if c, err := d.Client.LoadContainer(ctx, id); err == nil {
		if err := c.Delete(ctx, client.WithSnapshotCleanup); err != nil {
			t.Errorf("delete container %s: %v", id, err)
		}
	}
	nothingLeft(t, id, "", "")
}

// padCheckpoint stores, as ref+"-padded", ref's checkpoint with n empty
// files added to its CRIU images tar, and returns the new name.
func padCheckpoint(t *testing.T, d *harness.Daemon, ref string, n int) string {
	return rewriteCheckpoint(t, d, ref, ref+"-padded", func(data []byte) []byte { return paddedTar(t, data, n) })
}

// rewriteCheckpoint stores, as name, ref's checkpoint with its CRIU images
// tar rewritten by edit, and returns name.
func rewriteCheckpoint(t *testing.T, d *harness.Daemon, ref, name string, edit func([]byte) []byte) string {
	t.Helper()
	ctx, done, err := d.Client.WithLease(harness.NamespacedCtx())
	if err != nil {
		t.Fatal(err)
	}
	defer done(context.WithoutCancel(ctx))
	cs := d.Client.ContentStore()
	img, err := d.Client.ImageService().Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	var idx ocispec.Index
	readBlobJSON(ctx, t, cs, img.Target, &idx)
	found := false
	for i, m := range idx.Manifests {
		if m.MediaType != images.MediaTypeContainerd1Checkpoint {
			continue
		}
		data, err := content.ReadBlob(ctx, cs, m)
		if err != nil {
			t.Fatal(err)
		}
		idx.Manifests[i] = writeTestBlob(ctx, t, cs, m.MediaType, edit(data), nil)
		found = true
	}
	if !found {
		t.Fatalf("%s holds no checkpoint tar", ref)
	}
	raw, err := json.Marshal(idx)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for i, m := range idx.Manifests {
		labels[fmt.Sprintf("containerd.io/gc.ref.content.m.%d", i)] = m.Digest.String()
	}
	target := writeTestBlob(ctx, t, cs, img.Target.MediaType, raw, labels)
	if _, err := d.Client.ImageService().Create(ctx, images.Image{Name: name, Target: target, Labels: img.Labels}); err != nil {
		t.Fatal(err)
	}
	return name
}

func readBlobJSON(ctx context.Context, t *testing.T, cs content.Store, desc ocispec.Descriptor, v any) {
	t.Helper()
	data, err := content.ReadBlob(ctx, cs, desc)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

func writeTestBlob(ctx context.Context, t *testing.T, cs content.Store, mediaType string, data []byte, labels map[string]string) ocispec.Descriptor {
	t.Helper()
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := content.WriteBlob(ctx, cs, desc.Digest.String(), bytes.NewReader(data), desc, content.WithLabels(labels)); err != nil {
		t.Fatal(err)
	}
	return desc
}

// paddedTar is the tar data with n empty files added at its end.
func paddedTar(t *testing.T, data []byte, n int) []byte {
	t.Helper()
	var out bytes.Buffer
	tr, tw := tar.NewReader(bytes.NewReader(data)), tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		h := &tar.Header{Name: filepath.Join("padding", fmt.Sprintf("f%d", i)), Typeflag: tar.TypeReg, Mode: 0o600, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
