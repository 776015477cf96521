package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
)

const ImgTimeout = 2 * time.Minute

// ImgRegistry is a docker-registry serving on 127.0.0.1 from a temp dir.
type ImgRegistry struct {
	Addr    string
	Storage string
}

func StartRegistry(t testing.TB) *ImgRegistry {
	t.Helper()
	return startRegistryWith(t, "")
}

// startRegistryWith starts one with extra configuration (YAML, top level).
func startRegistryWith(t testing.TB, extra string) *ImgRegistry {
	t.Helper()
	r := testsupport.StartRegistry(t, extra)
	return &ImgRegistry{Addr: r.Addr, Storage: r.Storage}
}

// blobPath is where the registry keeps a blob's bytes.
func (r *ImgRegistry) BlobPath(d string) string {
	hex := strings.TrimPrefix(d, "sha256:")
	return filepath.Join(r.Storage, "docker/registry/v2/blobs/sha256", hex[:2], hex, "data")
}

// ImgNode is one "node": its own image store.
type ImgNode struct {
	Store string
	Env   []string
}

func NewNode(t testing.TB, env []string) *ImgNode {
	s := filepath.Join(t.TempDir(), "store")
	return &ImgNode{Store: s, Env: append(append([]string{}, env...), "CRYO_IMAGE_STORE="+s)}
}

func (n *ImgNode) Cryo(t testing.TB, args ...string) string {
	t.Helper()
	return Run(t, ImgTimeout, n.Env, CryoBin(t, "cryo"), args...)
}

func (n *ImgNode) CryoFails(t testing.TB, args ...string) string {
	t.Helper()
	return CryoFails(t, ImgTimeout, n.Env, args...)
}

// imgApp is fakecuda-app running detached, printing ticks to a file.
type imgApp struct {
	dir string
	PID int
}

func startImgApp(t *testing.T) *imgApp {
	t.Helper()
	a := &imgApp{dir: t.TempDir()}
	app := FakeFile(t, "fakecuda-app")
	cmd := exec.Command("setsid", "-f", "sh", "-c", "echo $$ > pid; exec "+app+" 50 4096 </dev/null >out 2>&1")
	cmd.Dir = a.dir
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Dir(FakeFile(t, "libcuda.so.1")))
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 10*time.Second, "pid file", func() bool {
		b, err := os.ReadFile(filepath.Join(a.dir, "pid"))
		a.PID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && a.PID > 0
	})
	t.Cleanup(func() { syscall.Kill(a.PID, syscall.SIGKILL) })
	a.WaitTick(t, 3)
	return a
}

func (a *imgApp) LastTick(t *testing.T) int {
	out, _ := os.ReadFile(filepath.Join(a.dir, "out"))
	return LastOf(FakeTicks(t, "fakecuda-app", string(out)))
}

func (a *imgApp) WaitTick(t *testing.T, n int) {
	t.Helper()
	WaitFor(t, 20*time.Second, "tick "+strconv.Itoa(n), func() bool { return a.LastTick(t) >= n })
}

// CheckpointApp checkpoints a fresh fakecuda-app (a CUDA process under the
// fake driver) into a directory; the app exits.
func CheckpointApp(t *testing.T, env []string) (*imgApp, string, int) {
	a := startImgApp(t)
	dir := filepath.Join(t.TempDir(), "ckpt")
	Run(t, ImgTimeout, env, CryoBin(t, "cryo"), "checkpoint", "--pid", strconv.Itoa(a.PID), "--dir", dir)
	WaitFor(t, 10*time.Second, "checkpointed app to exit", func() bool { return !procfs.Alive(a.PID) })
	return a, dir, a.LastTick(t)
}

// PushPlainImage pushes a one-layer image without checkpoint annotations.
func PushPlainImage(t *testing.T, ref string) {
	ctx := context.Background()
	repo, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	push := func(mt string, data []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(data), Size: int64(len(data))}
		if err := repo.Push(ctx, d, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	layer := push(ocispec.MediaTypeImageLayer, make([]byte, 1024))
	cfg, _ := json.Marshal(ocispec.Image{Platform: ocispec.Platform{OS: "linux", Architecture: "amd64"},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.Digest}}})
	man, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: push(ocispec.MediaTypeImageConfig, cfg), Layers: []ocispec.Descriptor{layer}})
	md := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(man), Size: int64(len(man))}
	if err := repo.PushReference(ctx, md, bytes.NewReader(man), "v1"); err != nil {
		t.Fatal(err)
	}
}

func WantEmpty(t *testing.T, dir, after string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("%s left behind after %s", filepath.Join(dir, e.Name()), after)
	}
}
