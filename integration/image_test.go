package integration

// Checkpoint images through a real registry (Debian's docker-registry on
// loopback, started here): build → push on "node A" (one image store),
// pull → verified unpack → restore on "node B" (another store), and the
// ways that must fail before CRIU sees anything: a tampered or truncated
// layer, a missing or wrong key, an image that is not a checkpoint, and
// interrupted transfers that must restart cleanly.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/cryo-gpu/cryo/internal/manifest"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

const imgTimeout = 2 * time.Minute

// imgRegistry is a docker-registry serving on 127.0.0.1 from a temp dir.
type imgRegistry struct {
	addr    string
	storage string
}

func startRegistry(t testing.TB) *imgRegistry {
	t.Helper()
	return startRegistryWith(t, "")
}

// startRegistryWith starts one with extra configuration (YAML, top level).
func startRegistryWith(t testing.TB, extra string) *imgRegistry {
	t.Helper()
	r := testsupport.StartRegistry(t, extra)
	return &imgRegistry{addr: r.Addr, storage: r.Storage}
}

// blobPath is where the registry keeps a blob's bytes.
func (r *imgRegistry) blobPath(d string) string {
	hex := strings.TrimPrefix(d, "sha256:")
	return filepath.Join(r.storage, "docker/registry/v2/blobs/sha256", hex[:2], hex, "data")
}

// imgNode is one "node": its own image store.
type imgNode struct {
	store string
	env   []string
}

func newNode(t testing.TB, env []string) *imgNode {
	s := filepath.Join(t.TempDir(), "store")
	return &imgNode{store: s, env: append(append([]string{}, env...), "CRYO_IMAGE_STORE="+s)}
}

func (n *imgNode) cryo(t testing.TB, args ...string) string {
	t.Helper()
	return run(t, imgTimeout, n.env, cryoBin(t, "cryo"), args...)
}

func (n *imgNode) cryoFails(t testing.TB, args ...string) string {
	t.Helper()
	return cryoFails(t, imgTimeout, n.env, args...)
}

// imgApp is fakecuda-app running detached, printing ticks to a file.
type imgApp struct {
	dir string
	pid int
}

func startImgApp(t *testing.T) *imgApp {
	t.Helper()
	a := &imgApp{dir: t.TempDir()}
	app := fakeFile(t, "fakecuda-app")
	cmd := exec.Command("setsid", "-f", "sh", "-c", "echo $$ > pid; exec "+app+" 50 4096 </dev/null >out 2>&1")
	cmd.Dir = a.dir
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Dir(fakeFile(t, "libcuda.so.1")))
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "pid file", func() bool {
		b, err := os.ReadFile(filepath.Join(a.dir, "pid"))
		a.pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && a.pid > 0
	})
	t.Cleanup(func() { syscall.Kill(a.pid, syscall.SIGKILL) })
	a.waitTick(t, 3)
	return a
}

func (a *imgApp) lastTick(t *testing.T) int {
	out, _ := os.ReadFile(filepath.Join(a.dir, "out"))
	return lastOf(fakeTicks(t, "fakecuda-app", string(out)))
}

func (a *imgApp) waitTick(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, "tick "+strconv.Itoa(n), func() bool { return a.lastTick(t) >= n })
}

// checkpointApp checkpoints a fresh fakecuda-app (a CUDA process under the
// fake driver) into a directory; the app exits.
func checkpointApp(t *testing.T, env []string) (*imgApp, string, int) {
	a := startImgApp(t)
	dir := filepath.Join(t.TempDir(), "ckpt")
	run(t, imgTimeout, env, cryoBin(t, "cryo"), "checkpoint", "--pid", strconv.Itoa(a.pid), "--dir", dir)
	waitFor(t, 10*time.Second, "checkpointed app to exit", func() bool { return !procfs.Alive(a.pid) })
	return a, dir, a.lastTick(t)
}

// TestImageRegistryRoundTrip: node A checkpoints a CUDA process, builds and
// pushes; node B inspects without pulling, pulls, restores, and the process
// continues from its tick with its device memory intact.
func TestImageRegistryRoundTrip(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	reg := startRegistry(t)
	a, b := newNode(t, env), newNode(t, env)
	app, dir, tick := checkpointApp(t, env)
	ref := reg.addr + "/ckpt/app:v1"

	wantIn(t, a.cryo(t, "image", "build", dir, ref), "layer base", "built "+ref)
	wantIn(t, a.cryo(t, "image", "push", ref), "push "+ref, "done in")
	assertPrivate(t, a.store)

	js := b.cryo(t, "inspect", "--json", ref)
	var sum struct {
		Kind      string
		Processes []struct{ CUDA bool }
		Sizes     struct{ Total, Compressed int64 }
	}
	if err := json.Unmarshal([]byte(js[strings.Index(js, "{"):]), &sum); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	if sum.Kind != "process" || len(sum.Processes) == 0 || !sum.Processes[0].CUDA || sum.Sizes.Compressed == 0 {
		t.Errorf("inspect of the registry image: %+v", sum)
	}
	wantIn(t, b.cryo(t, "image", "pull", ref), "pull "+ref, "done in")
	assertPrivate(t, b.store)
	work := filepath.Join(t.TempDir(), "work")
	out := b.cryo(t, "image", "restore", "--dir", work, ref)
	pid, _ := strconv.Atoi(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
	if pid != app.pid {
		t.Fatalf("restored pid %d, want %d:\n%s", pid, app.pid, out)
	}
	app.waitTick(t, tick+5)
}

// assertPrivate: the layers of a store are readable by the owner only.
func assertPrivate(t *testing.T, store string) {
	t.Helper()
	if st, err := os.Stat(store); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("store %s: mode %v, want 0700 (%v)", store, st.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(filepath.Join(store, "blobs/sha256"))
	for _, e := range entries {
		info, _ := e.Info()
		if info.Size() > 4096 && info.Mode().Perm()&0o077 != 0 {
			t.Errorf("blob %s has mode %v: want no access for group and others", e.Name(), info.Mode().Perm())
		}
	}
}

// TestImageIntegrity: a tampered and a truncated layer in the registry are
// refused at pull; a tampered layer in the local store is refused at
// restore, before CRIU runs (the original pid stays free).
func TestImageIntegrity(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	reg := startRegistry(t)
	a := newNode(t, env)
	app, dir, _ := checkpointApp(t, env)
	ref := reg.addr + "/ckpt/tamper:v1"
	a.cryo(t, "image", "build", dir, ref)
	a.cryo(t, "image", "push", ref)
	layer := layerDigest(t, a, ref)

	// Local store: flip a byte of the layer; restore must refuse it.
	blob := filepath.Join(a.store, "blobs/sha256", strings.TrimPrefix(layer, "sha256:"))
	orig, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(orig)
	flipped[len(flipped)/2] ^= 0xff
	os.WriteFile(blob, flipped, 0o600)
	work := filepath.Join(t.TempDir(), "work")
	out := a.cryoFails(t, "image", "restore", "--dir", work, ref)
	wantIn(t, out, "truncated or corrupt", "failed verification")
	if _, err := os.Stat(work); err == nil {
		t.Errorf("%s left behind after a refused unpack", work)
	}
	if procfs.Alive(app.pid) {
		t.Errorf("pid %d is alive: the tampered checkpoint was restored", app.pid)
	}

	// Registry: tampered, then truncated.
	regBlob := reg.blobPath(layer)
	os.WriteFile(regBlob, flipped, 0o644)
	out = newNode(t, env).cryoFails(t, "image", "pull", "--retries", "1", ref)
	wantIn(t, out, "does not match its digest", "failed verification")
	os.WriteFile(regBlob, orig[:len(orig)/2], 0o644)
	out = newNode(t, env).cryoFails(t, "image", "pull", "--retries", "1", ref)
	wantIn(t, out, "truncated", "failed verification")
}

func layerDigest(t *testing.T, n *imgNode, ref string) string {
	t.Helper()
	js := n.cryo(t, "inspect", "--json", ref)
	var sum struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal([]byte(js[strings.Index(js, "{"):]), &sum); err != nil || len(sum.Layers) == 0 {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	return sum.Layers[0].Digest
}

// TestImageEncrypted: an encrypted image unpacks only with the key.
func TestImageEncrypted(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	reg := startRegistry(t)
	a, b := newNode(t, env), newNode(t, env)
	app, dir, tick := checkpointApp(t, env)
	keys := t.TempDir()
	pub, priv := writeKeyPair(t, keys, "right")
	_, wrong := writeKeyPair(t, keys, "wrong")
	ref := reg.addr + "/ckpt/secret:v1"
	a.cryo(t, "image", "build", "--encryption-key", "jwe:"+pub, dir, ref)
	a.cryo(t, "image", "push", ref)
	wantIn(t, b.cryo(t, "image", "pull", ref), "done in")
	wantIn(t, b.cryo(t, "inspect", ref), "encrypted: true")

	work := filepath.Join(t.TempDir(), "work")
	wantIn(t, b.cryoFails(t, "image", "restore", "--dir", work, ref), "is encrypted and no key was given", "--decryption-key")
	wantIn(t, b.cryoFails(t, "image", "restore", "--dir", work, "--decryption-key", wrong, ref), "none of the given keys can decrypt it")
	if procfs.Alive(app.pid) {
		t.Fatalf("restored without the key")
	}
	b.cryo(t, "image", "restore", "--dir", work, "--decryption-key", priv, ref)
	app.waitTick(t, tick+5)
}

func writeKeyPair(t *testing.T, dir, name string) (pub, priv string) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	pub, priv = filepath.Join(dir, name+".pub.pem"), filepath.Join(dir, name+".pem")
	os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600)
	os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600)
	return pub, priv
}

// TestImageNotCheckpoint: an ordinary image gets a clear refusal, before
// any layer is pulled.
func TestImageNotCheckpoint(t *testing.T) {
	requireRoot(t)
	reg := startRegistry(t)
	ref := reg.addr + "/plain/busybox:v1"
	pushPlainImage(t, ref)
	n := newNode(t, nil)
	out := n.cryoFails(t, "image", "pull", ref)
	wantIn(t, out, "is not a checkpoint image", "cryo image build")
	out = n.cryoFails(t, "image", "restore", "--pull", "--dir", filepath.Join(t.TempDir(), "w"), ref)
	wantIn(t, out, "is not a checkpoint image")
}

// pushPlainImage pushes a one-layer image without checkpoint annotations.
func pushPlainImage(t *testing.T, ref string) {
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

// TestImageInterruptedTransfers: a push and a pull killed half-way are
// simply run again; the result unpacks and verifies.
func TestImageInterruptedTransfers(t *testing.T) {
	requireRoot(t)
	reg := startRegistry(t)
	dir := bigCheckpointDir(t, 256<<20)
	a, b := newNode(t, nil), newNode(t, nil)
	ref := reg.addr + "/ckpt/big:v1"
	a.cryo(t, "image", "build", "--level", "fastest", dir, ref)

	interrupt(t, a, "push", ref, reg.storage)
	a.cryo(t, "image", "push", ref)
	interrupt(t, b, "pull", ref, b.store)
	b.cryo(t, "image", "pull", ref)
	work := filepath.Join(t.TempDir(), "work")
	b.cryo(t, "image", "unpack", ref, work)
	got, _ := os.ReadFile(filepath.Join(work, "checkpoint/pages-1.img"))
	want, _ := os.ReadFile(filepath.Join(dir, "pages-1.img"))
	if !bytes.Equal(got, want) {
		t.Fatalf("pages-1.img differs after interrupted transfers")
	}
}

// interrupt starts a transfer and kills it once it has moved some bytes:
// once dest (where they land) has grown by 32 MiB. Its progress lines are
// too sparse off a terminal to time the kill by.
func interrupt(t *testing.T, n *imgNode, verb, ref, dest string) {
	t.Helper()
	cmd := exec.Command(cryoBin(t, "cryo"), "image", verb, ref)
	cmd.Env = append(os.Environ(), n.env...)
	var out testsupport.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := treeBytes(dest)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && treeBytes(dest) < start+32<<20 {
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	t.Logf("interrupted %s:\n%s", verb, out.String())
	if strings.Contains(out.String(), " done in") {
		t.Fatalf("the %s ended before it could be interrupted", verb)
	}
}

// treeBytes is the size of the files under dir, while files come and go
// (uploads renamed into place).
func treeBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// bigCheckpointDir fakes a CRIU directory with size bytes of random pages,
// sealed with a cryo manifest (image build refuses a directory without).
func bigCheckpointDir(t *testing.T, size int) string {
	dir := filepath.Join(t.TempDir(), "big")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("fake inventory"), 0o600)
	f, err := os.Create(filepath.Join(dir, "pages-1.img"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := 0; i < size>>20; i++ {
		rand.Read(buf)
		f.Write(buf)
	}
	f.Close()
	sealFakeCheckpoint(t, dir)
	return dir
}

// sealFakeCheckpoint writes the manifest of a CPU checkpoint with the
// digests of dir's files, as a checkpoint through cryo would.
func sealFakeCheckpoint(t testing.TB, dir string) {
	t.Helper()
	m := manifest.New("fake")
	var err error
	if m.Digests, err = filedigest.Files(dir); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(dir, m); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkImageTransfer measures, in one run, a checkpoint directory of
// $CRYO_BENCH_GIB GiB (default 3) of pages, 5/6 zero and 1/6 random, against
// its image: build (compression) throughput and size, then push, pull and
// unpack throughput through a registry on loopback.
// Run: go test -run XXX -bench ImageTransfer -benchtime 1x ./integration/
func BenchmarkImageTransfer(b *testing.B) {
	gib, _ := strconv.Atoi(os.Getenv("CRYO_BENCH_GIB"))
	if gib <= 0 {
		gib = 3
	}
	dir := mixedCheckpointDir(b, gib)
	reg := startRegistry(b)
	a, n := newNode(b, nil), newNode(b, nil)
	ref := reg.addr + "/bench/ckpt:v1"
	raw := float64(gib << 30)
	timed := func(what string, f func()) {
		start := time.Now()
		f()
		s := time.Since(start).Seconds()
		b.Logf("%-7s %6.2f s  %7.0f MiB/s of raw checkpoint", what, s, raw/s/(1<<20))
		b.ReportMetric(raw/s/(1<<20), what+"-MiB/s")
	}
	b.ResetTimer()
	timed("build", func() { a.cryo(b, "image", "build", dir, ref) })
	timed("push", func() { a.cryo(b, "image", "push", "-q", ref) })
	timed("pull", func() { n.cryo(b, "image", "pull", "-q", ref) })
	timed("unpack", func() { n.cryo(b, "image", "unpack", ref, filepath.Join(b.TempDir(), "w")) })
	b.StopTimer()
	js := a.cryo(b, "inspect", "--json", ref)
	var sum struct {
		Sizes struct{ Total, Compressed int64 }
	}
	json.Unmarshal([]byte(js[strings.Index(js, "{"):]), &sum)
	b.Logf("raw %d MiB, image %d MiB, ratio %.2f", sum.Sizes.Total>>20, sum.Sizes.Compressed>>20, float64(sum.Sizes.Total)/float64(sum.Sizes.Compressed))
	b.ReportMetric(float64(sum.Sizes.Compressed>>20), "image-MiB")
}

// mixedCheckpointDir fakes a CRIU directory of gib GiB of pages in files of
// 1 GiB: in each, 1 MiB of random data follows every 5 MiB of zeros, as in
// a process whose heap is mostly untouched.
func mixedCheckpointDir(b testing.TB, gib int) string {
	dir := filepath.Join(b.TempDir(), "ckpt")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("fake inventory"), 0o600)
	zero, rnd := make([]byte, 1<<20), make([]byte, 1<<20)
	for i := 1; i <= gib; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("pages-%d.img", i)))
		if err != nil {
			b.Fatal(err)
		}
		for mib := 0; mib < 1024; mib++ {
			if mib%6 == 5 {
				rand.Read(rnd)
				f.Write(rnd)
			} else {
				f.Write(zero)
			}
		}
		f.Close()
	}
	sealFakeCheckpoint(b, dir)
	return dir
}

// TestImagePodmanExport: a Podman export travels through the registry and
// is restored by Podman on node B through `cryo image restore`. The
// container runs on cryo-runc, so that its export carries cryo's manifest:
// image build refuses an export without one.
func TestImagePodmanExport(t *testing.T) {
	requireRoot(t)
	reg := startRegistry(t)
	a, b := newNode(t, nil), newNode(t, nil)
	dir := t.TempDir()
	root := filepath.Join(dir, "rootfs")
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	os.MkdirAll(filepath.Join(root, "tmp"), 0o1777)
	copyFile(t, "/bin/busybox", filepath.Join(root, "bin/busybox"), 0o755)
	os.Symlink("busybox", filepath.Join(root, "bin/sh"))
	os.Symlink("busybox", filepath.Join(root, "bin/sleep"))
	base, name, restored := "localhost/cryo-imgtest-base:1", "cryo-imgtest", "cryo-imgtest-restored"
	run(t, imgTimeout, nil, "sh", "-c", "tar -C "+root+" -c . | podman import -q - "+base)
	onCryoRunc := []string{"--runtime", cryoBin(t, "cryo-runc")}
	pm := func(args ...string) string { return run(t, imgTimeout, nil, "podman", append(onCryoRunc, args...)...) }
	t.Cleanup(func() {
		runErr(imgTimeout, nil, "podman", "rm", "-f", "-t", "0", name, restored)
		runErr(imgTimeout, nil, "podman", "rmi", "-f", base)
	})
	pm("run", "-d", "--name", name, "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", base,
		"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.05; done")
	counter := func(c string) int {
		n, _ := strconv.Atoi(strings.TrimSpace(pm("exec", c, "busybox", "cat", "/tmp/c")))
		return n
	}
	waitFor(t, 10*time.Second, "counter", func() bool { return counter(name) > 5 })
	export := filepath.Join(dir, "export.tar.zst")
	before := counter(name) // a lower bound of the checkpointed value
	pm("container", "checkpoint", "--export", export, name)
	pm("rm", "-f", name)

	ref := reg.addr + "/ckpt/podman:v1"
	a.cryo(t, "image", "build", export, ref)
	a.cryo(t, "image", "push", ref)
	wantIn(t, b.cryo(t, "inspect", ref), "Kind:", "podman", name)
	b.cryo(t, "image", "restore", "--pull", "--name", restored, "--dir", filepath.Join(t.TempDir(), "w"), ref)
	waitFor(t, 20*time.Second, "restored counter to advance", func() bool { return counter(restored) > before+5 })
}

// TestImageRestoreRemovesWorkDir: the work directory of "cryo image
// restore" (the process's memory, decrypted) is gone after a restore that
// succeeded and after one that failed; one left by a killed cryo (its
// owner's pid is dead) is removed by the next restore.
func TestImageRestoreRemovesWorkDir(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	base := filepath.Join(t.TempDir(), "restore")
	a := newNode(t, append(env, "CRYO_RESTORE_DIR="+base))
	app, dir, tick := checkpointApp(t, env)
	ref := "localhost/ckpt/workdir:v1"
	a.cryo(t, "image", "build", dir, ref)
	stale := filepath.Join(base, "image-4194304-1")
	os.MkdirAll(stale, 0o700)
	os.WriteFile(filepath.Join(stale, "pages-1.img"), []byte("secret"), 0o600)

	// A restore that fails after the unpack (the GPU map names a GPU the
	// checkpoint did not use) removes its work directory, and keeps one
	// given with --dir.
	badMap := "GPU-00000000-0000-4000-8000-000000000009=GPU-00000000-0000-4000-8000-000000000008"
	a.cryoFails(t, "image", "restore", "--gpu-map", badMap, ref)
	wantEmpty(t, base, "a failed restore")
	work := filepath.Join(t.TempDir(), "work")
	out := a.cryoFails(t, "image", "restore", "--dir", work, "--gpu-map", badMap, ref)
	wantIn(t, out, "the work directory "+work+" is kept (--dir)")

	out = a.cryo(t, "image", "restore", ref)
	if !strings.HasSuffix(strings.TrimSpace(out), strconv.Itoa(app.pid)) {
		t.Fatalf("restore printed no pid %d:\n%s", app.pid, out)
	}
	app.waitTick(t, tick+3)
	wantEmpty(t, base, "a successful restore")

	// The original pid is taken by the restored app: refused before the
	// unpack, which leaves nothing either.
	a.cryoFails(t, "image", "restore", ref)
	wantEmpty(t, base, "a refused restore")

}

func wantEmpty(t *testing.T, dir, after string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("%s left behind after %s", filepath.Join(dir, e.Name()), after)
	}
}
