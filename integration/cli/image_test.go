package cli

import (
	"bytes"
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
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// TestImageRegistryRoundTrip: node A checkpoints a CUDA process, builds and
// pushes; node B inspects without pulling, pulls, restores, and the process
// continues from its tick with its device memory intact.
func TestImageRegistryRoundTrip(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	reg := harness.StartRegistry(t)
	a, b := harness.NewNode(t, env), harness.NewNode(t, env)
	app, dir, tick := harness.CheckpointApp(t, env)
	ref := reg.Addr + "/ckpt/app:v1"

	harness.WantIn(t, a.Cryo(t, "image", "build", dir, ref), "layer base", "built "+ref)
	harness.WantIn(t, a.Cryo(t, "image", "push", ref), "push "+ref, "done in")
	assertPrivate(t, a.Store)

	js := b.Cryo(t, "inspect", "--json", ref)
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
	harness.WantIn(t, b.Cryo(t, "image", "pull", ref), "pull "+ref, "done in")
	assertPrivate(t, b.Store)
	work := filepath.Join(t.TempDir(), "work")
	out := b.Cryo(t, "image", "restore", "--dir", work, ref)
	pid, _ := strconv.Atoi(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
	if pid != app.PID {
		t.Fatalf("restored pid %d, want %d:\n%s", pid, app.PID, out)
	}
	app.WaitTick(t, tick+5)
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
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	reg := harness.StartRegistry(t)
	a := harness.NewNode(t, env)
	app, dir, _ := harness.CheckpointApp(t, env)
	ref := reg.Addr + "/ckpt/tamper:v1"
	a.Cryo(t, "image", "build", dir, ref)
	a.Cryo(t, "image", "push", ref)
	layer := layerDigest(t, a, ref)

	// Local store: flip a byte of the layer; restore must refuse it.
	blob := filepath.Join(a.Store, "blobs/sha256", strings.TrimPrefix(layer, "sha256:"))
	orig, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(orig)
	flipped[len(flipped)/2] ^= 0xff
	os.WriteFile(blob, flipped, 0o600)
	work := filepath.Join(t.TempDir(), "work")
	out := a.CryoFails(t, "image", "restore", "--dir", work, ref)
	harness.WantIn(t, out, "truncated or corrupt", "failed verification")
	if _, err := os.Stat(work); err == nil {
		t.Errorf("%s left behind after a refused unpack", work)
	}
	if procfs.Alive(app.PID) {
		t.Errorf("pid %d is alive: the tampered checkpoint was restored", app.PID)
	}

	// Registry: tampered, then truncated.
	regBlob := reg.BlobPath(layer)
	os.WriteFile(regBlob, flipped, 0o644)
	out = harness.NewNode(t, env).CryoFails(t, "image", "pull", "--retries", "1", ref)
	harness.WantIn(t, out, "does not match its digest", "failed verification")
	os.WriteFile(regBlob, orig[:len(orig)/2], 0o644)
	out = harness.NewNode(t, env).CryoFails(t, "image", "pull", "--retries", "1", ref)
	harness.WantIn(t, out, "truncated", "failed verification")
}

func layerDigest(t *testing.T, n *harness.ImgNode, ref string) string {
	t.Helper()
	js := n.Cryo(t, "inspect", "--json", ref)
	var sum struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal([]byte(js[strings.Index(js, "{"):]), &sum); err != nil || len(sum.Layers) == 0 {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	return sum.Layers[0].Digest
}

// TestImageEncrypted: an encrypted image unpacks only with the key.
func TestImageEncrypted(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	reg := harness.StartRegistry(t)
	a, b := harness.NewNode(t, env), harness.NewNode(t, env)
	app, dir, tick := harness.CheckpointApp(t, env)
	keys := t.TempDir()
	pub, priv := writeKeyPair(t, keys, "right")
	_, wrong := writeKeyPair(t, keys, "wrong")
	ref := reg.Addr + "/ckpt/secret:v1"
	a.Cryo(t, "image", "build", "--encryption-key", "jwe:"+pub, dir, ref)
	a.Cryo(t, "image", "push", ref)
	harness.WantIn(t, b.Cryo(t, "image", "pull", ref), "done in")
	harness.WantIn(t, b.Cryo(t, "inspect", ref), "encrypted: true")

	work := filepath.Join(t.TempDir(), "work")
	harness.WantIn(t, b.CryoFails(t, "image", "restore", "--dir", work, ref), "is encrypted and no key was given", "--decryption-key")
	harness.WantIn(t, b.CryoFails(t, "image", "restore", "--dir", work, "--decryption-key", wrong, ref), "none of the given keys can decrypt it")
	if procfs.Alive(app.PID) {
		t.Fatalf("restored without the key")
	}
	b.Cryo(t, "image", "restore", "--dir", work, "--decryption-key", priv, ref)
	app.WaitTick(t, tick+5)
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
	harness.RequireRoot(t)
	reg := harness.StartRegistry(t)
	ref := reg.Addr + "/plain/busybox:v1"
	harness.PushPlainImage(t, ref)
	n := harness.NewNode(t, nil)
	out := n.CryoFails(t, "image", "pull", ref)
	harness.WantIn(t, out, "is not a checkpoint image", "cryo image build")
	out = n.CryoFails(t, "image", "restore", "--pull", "--dir", filepath.Join(t.TempDir(), "w"), ref)
	harness.WantIn(t, out, "is not a checkpoint image")
}

// TestImageInterruptedTransfers: a push and a pull killed half-way are
// simply run again; the result unpacks and verifies.
func TestImageInterruptedTransfers(t *testing.T) {
	harness.RequireRoot(t)
	reg := harness.StartRegistry(t)
	dir := bigCheckpointDir(t, 256<<20)
	a, b := harness.NewNode(t, nil), harness.NewNode(t, nil)
	ref := reg.Addr + "/ckpt/big:v1"
	a.Cryo(t, "image", "build", "--level", "fastest", dir, ref)

	interrupt(t, a, "push", ref, reg.Storage)
	a.Cryo(t, "image", "push", ref)
	interrupt(t, b, "pull", ref, b.Store)
	b.Cryo(t, "image", "pull", ref)
	work := filepath.Join(t.TempDir(), "work")
	b.Cryo(t, "image", "unpack", ref, work)
	got, _ := os.ReadFile(filepath.Join(work, "checkpoint/pages-1.img"))
	want, _ := os.ReadFile(filepath.Join(dir, "pages-1.img"))
	if !bytes.Equal(got, want) {
		t.Fatalf("pages-1.img differs after interrupted transfers")
	}
}

// interrupt starts a transfer and kills it once it has moved some bytes:
// once dest (where they land) has grown by 32 MiB. Its progress lines are
// too sparse off a terminal to time the kill by.
func interrupt(t *testing.T, n *harness.ImgNode, verb, ref, dest string) {
	t.Helper()
	cmd := exec.Command(harness.CryoBin(t, "cryo"), "image", verb, ref)
	cmd.Env = append(os.Environ(), n.Env...)
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
// Run: go test -run XXX -bench ImageTransfer -benchtime 1x ./integration/cli/
func BenchmarkImageTransfer(b *testing.B) {
	gib, _ := strconv.Atoi(os.Getenv("CRYO_BENCH_GIB"))
	if gib <= 0 {
		gib = 3
	}
	dir := mixedCheckpointDir(b, gib)
	reg := harness.StartRegistry(b)
	a, n := harness.NewNode(b, nil), harness.NewNode(b, nil)
	ref := reg.Addr + "/bench/ckpt:v1"
	raw := float64(gib << 30)
	timed := func(what string, f func()) {
		start := time.Now()
		f()
		s := time.Since(start).Seconds()
		b.Logf("%-7s %6.2f s  %7.0f MiB/s of raw checkpoint", what, s, raw/s/(1<<20))
		b.ReportMetric(raw/s/(1<<20), what+"-MiB/s")
	}
	b.ResetTimer()
	timed("build", func() { a.Cryo(b, "image", "build", dir, ref) })
	timed("push", func() { a.Cryo(b, "image", "push", "-q", ref) })
	timed("pull", func() { n.Cryo(b, "image", "pull", "-q", ref) })
	timed("unpack", func() { n.Cryo(b, "image", "unpack", ref, filepath.Join(b.TempDir(), "w")) })
	b.StopTimer()
	js := a.Cryo(b, "inspect", "--json", ref)
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
	harness.RequireRoot(t)
	reg := harness.StartRegistry(t)
	a, b := harness.NewNode(t, nil), harness.NewNode(t, nil)
	dir := t.TempDir()
	root := filepath.Join(dir, "rootfs")
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	os.MkdirAll(filepath.Join(root, "tmp"), 0o1777)
	harness.CopyFile(t, "/bin/busybox", filepath.Join(root, "bin/busybox"), 0o755)
	os.Symlink("busybox", filepath.Join(root, "bin/sh"))
	os.Symlink("busybox", filepath.Join(root, "bin/sleep"))
	base, name, restored := "localhost/cryo-imgtest-base:1", "cryo-imgtest", "cryo-imgtest-restored"
	harness.Run(t, harness.ImgTimeout, nil, "sh", "-c", "tar -C "+root+" -c . | podman import -q - "+base)
	onCryoRunc := []string{"--runtime", harness.CryoBin(t, "cryo-runc")}
	pm := func(args ...string) string {
		return harness.Run(t, harness.ImgTimeout, nil, "podman", append(onCryoRunc, args...)...)
	}
	t.Cleanup(func() {
		harness.RunErr(harness.ImgTimeout, nil, "podman", "rm", "-f", "-t", "0", name, restored)
		harness.RunErr(harness.ImgTimeout, nil, "podman", "rmi", "-f", base)
	})
	pm("run", "-d", "--name", name, "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", base,
		"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.05; done")
	counter := func(c string) int {
		n, _ := strconv.Atoi(strings.TrimSpace(pm("exec", c, "busybox", "cat", "/tmp/c")))
		return n
	}
	harness.WaitFor(t, 10*time.Second, "counter", func() bool { return counter(name) > 5 })
	export := filepath.Join(dir, "export.tar.zst")
	before := counter(name) // a lower bound of the checkpointed value
	pm("container", "checkpoint", "--export", export, name)
	pm("rm", "-f", name)

	ref := reg.Addr + "/ckpt/podman:v1"
	a.Cryo(t, "image", "build", export, ref)
	a.Cryo(t, "image", "push", ref)
	harness.WantIn(t, b.Cryo(t, "inspect", ref), "Kind:", "podman", name)
	b.Cryo(t, "image", "restore", "--pull", "--name", restored, "--dir", filepath.Join(t.TempDir(), "w"), ref)
	harness.WaitFor(t, 20*time.Second, "restored counter to advance", func() bool { return counter(restored) > before+5 })
}

// TestImageRestoreRemovesWorkDir: the work directory of "cryo image
// restore" (the process's memory, decrypted) is gone after a restore that
// succeeded and after one that failed; one left by a killed cryo (its
// owner's pid is dead) is removed by the next restore.
func TestImageRestoreRemovesWorkDir(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	base := filepath.Join(t.TempDir(), "restore")
	a := harness.NewNode(t, append(env, "CRYO_RESTORE_DIR="+base))
	app, dir, tick := harness.CheckpointApp(t, env)
	ref := "localhost/ckpt/workdir:v1"
	a.Cryo(t, "image", "build", dir, ref)
	stale := filepath.Join(base, "image-4194304-1")
	os.MkdirAll(stale, 0o700)
	os.WriteFile(filepath.Join(stale, "pages-1.img"), []byte("secret"), 0o600)

	// A restore that fails after the unpack (the GPU map names a GPU the
	// checkpoint did not use) removes its work directory, and keeps one
	// given with --dir.
	badMap := "GPU-00000000-0000-4000-8000-000000000009=GPU-00000000-0000-4000-8000-000000000008"
	a.CryoFails(t, "image", "restore", "--gpu-map", badMap, ref)
	harness.WantEmpty(t, base, "a failed restore")
	work := filepath.Join(t.TempDir(), "work")
	out := a.CryoFails(t, "image", "restore", "--dir", work, "--gpu-map", badMap, ref)
	harness.WantIn(t, out, "the work directory "+work+" is kept (--dir)")

	out = a.Cryo(t, "image", "restore", ref)
	if !strings.HasSuffix(strings.TrimSpace(out), strconv.Itoa(app.PID)) {
		t.Fatalf("restore printed no pid %d:\n%s", app.PID, out)
	}
	app.WaitTick(t, tick+3)
	harness.WantEmpty(t, base, "a successful restore")

	// The original pid is taken by the restored app: refused before the
	// unpack, which leaves nothing either.
	a.CryoFails(t, "image", "restore", ref)
	harness.WantEmpty(t, base, "a refused restore")

}
