package criu

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// zeroTmpfsMiB is the size of the container's /dev/shm file of written zeros.
const zeroTmpfsMiB = 256

// tmpfsFile is a file the test writes into the container's /dev/shm.
type tmpfsFile struct {
	name    string
	data    []byte
	nonzero int64 // bytes of its pages that hold a non-zero byte
}

// zeroTmpfsFiles: "zeros", every page written, one page in 64 made
// non-zero (whole, or only its first, a middle or its last byte) and
// ending in zero pages; "tail", zeros up to a last non-zero byte in a
// partial page; "random", no zero page; "small", less than a page.
func zeroTmpfsFiles(t *testing.T) []tmpfsFile {
	t.Helper()
	const page = 4096
	z := make([]byte, zeroTmpfsMiB<<20)
	var nz int64
	for i, p := 0, 3; p < len(z)/page-64; i, p = i+1, p+64 {
		off := p * page
		switch i % 4 {
		case 0:
			if _, err := rand.Read(z[off : off+page]); err != nil {
				t.Fatal(err)
			}
			z[off] |= 1
		case 1:
			z[off] = 0x5a
		case 2:
			z[off+page/2+7] = 0xa5
		case 3:
			z[off+page-1] = 1
		}
		nz += page
	}
	tl := make([]byte, 1<<20+123)
	tl[len(tl)-1] = 7
	rnd := make([]byte, 1<<20)
	if _, err := rand.Read(rnd); err != nil {
		t.Fatal(err)
	}
	return []tmpfsFile{
		{"zeros", z, nz},
		{"tail", tl, page},
		{"random", rnd, int64(len(rnd))},
		{"small", []byte("not a page of /dev/shm\n"), page},
	}
}

// zeroTmpfsBundle is RwBundle with a /dev/shm large enough for the files.
func zeroTmpfsBundle(t *testing.T, dir string) string {
	t.Helper()
	harness.RwBundle(t, dir)
	path := filepath.Join(dir, "config.json")
	data, _ := os.ReadFile(path)
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	found := false
	for i, m := range spec.Mounts {
		if m.Destination == "/dev/shm" {
			spec.Mounts[i].Type, spec.Mounts[i].Source = "tmpfs", "shm"
			spec.Mounts[i].Options = []string{"nosuid", "noexec", "nodev", "mode=1777", "size=" + strconv.Itoa(2*zeroTmpfsMiB) + "m"}
			found = true
		}
	}
	if !found {
		t.Fatalf("runc's spec has no /dev/shm mount: %s", data)
	}
	data, _ = json.Marshal(&spec)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeTmpfsFiles writes every byte of the files, zeros included, into the
// container's /dev/shm: tmpfs holds each page as data.
func writeTmpfsFiles(t *testing.T, pid int, files []tmpfsFile) {
	t.Helper()
	shm := filepath.Join("/proc", strconv.Itoa(pid), "root/dev/shm")
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(shm, f.name), f.data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if used := tmpfsUsed(t, shm); used < zeroTmpfsMiB<<20 {
		t.Fatalf("/dev/shm uses %d bytes after the zeros were written, want at least %d", used, zeroTmpfsMiB<<20)
	}
}

// tmpfsUsed is the memory a tmpfs mount holds (statfs).
func tmpfsUsed(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// checkTmpfsFiles compares every byte of the restored files and returns
// the bytes they have allocated and the memory of the mount.
func checkTmpfsFiles(t *testing.T, after string, pid int, files []tmpfsFile) (alloc map[string]int64, used int64) {
	t.Helper()
	shm := filepath.Join("/proc", strconv.Itoa(pid), "root/dev/shm")
	alloc = map[string]int64{}
	for _, f := range files {
		p := filepath.Join(shm, f.name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
		if !bytes.Equal(b, f.data) {
			t.Fatalf("after %s: /dev/shm/%s differs from what was written (%d bytes, want %d)", after, f.name, len(b), len(f.data))
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o777 != 0o640 {
			t.Errorf("after %s: /dev/shm/%s has mode %o, want 640", after, f.name, st.Mode&0o777)
		}
		alloc[f.name] = st.Blocks * 512
	}
	return alloc, tmpfsUsed(t, shm)
}

// tmpfsTars sums the sizes, compressed and not, of the image's tars of
// tmpfs mounts, and says which holds /dev/shm's "zeros" as a sparse file.
func tmpfsTars(t *testing.T, img string) (gz, raw int64, sparse bool) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(img, "tmpfs-dev-*.tar.gz.img"))
	if len(files) == 0 {
		t.Fatalf("no tmpfs-dev-*.tar.gz.img in %s", img)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		gz += fi.Size()
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var buf bytes.Buffer
		n, err := io.Copy(&buf, zr)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		raw += n
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if h.Name == "./zeros" {
				sparse = h.PAXRecords["GNU.sparse.major"] == "1"
			}
		}
	}
	return gz, raw, sparse
}

// TestCRIUZeroTmpfs: fakecuda-app in a container of cryo-runc whose
// /dev/shm (a tmpfs mount) holds a file of 256 MiB of written zeros with
// one page in 64 non-zero, and three smaller files. Checkpointed by cryo's
// CRIU, the tar of the mount holds about the non-zero pages only, even
// uncompressed, "zeros" as a sparse file; restored, every byte of every
// file is as written, and the zeros are holes: the files' allocated
// blocks and the mount's memory are about their non-zero pages. The same
// image restores so with stock CRIU (whose tmpfs restore is cryo's). With
// CRYO_CRIU_ZERO_PAGES=0 the tar is stock CRIU's: the zeros are data, and
// cryo's CRIU restores that image as well, writing them back.
func TestCRIUZeroTmpfs(t *testing.T) {
	harness.RequireRoot(t)
	criu := harness.PatchedCRIU(t)
	if out, err := harness.RunErr(time.Minute, nil, criu, "check", "--feature", "cryo_zero_tmpfs"); err != nil {
		t.Fatalf("%s lacks cryo's tmpfs zero-page patch (run `make deps`): %v\n%s", criu, err, out)
	}
	dir := t.TempDir()
	stockDir := filepath.Join(dir, "stock")
	if err := os.MkdirAll(stockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(harness.StockCRIU(t), filepath.Join(stockDir, "criu")); err != nil {
		t.Fatal(err) // cryo-runc runs the criu of CRYO_CRIU's directory
	}
	// The CRIU of each environment file, also in cryo-runc's environment,
	// where it would otherwise inherit the test's $CRYO_CRIU.
	criuOf := map[string][]string{}
	envFile := func(name string, lines ...string) string {
		path := filepath.Join(dir, name)
		all := append(append([]string{"CRYO_RUNC=/usr/sbin/runc"}, lines...), harness.FakeDriverEnv(t, "")...)
		if err := os.WriteFile(path, []byte(strings.Join(all, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		criuOf[path] = lines[:1]
		return path
	}
	on := envFile("on.env", "CRYO_CRIU="+criu)
	off := envFile("off.env", "CRYO_CRIU="+criu, "CRYO_CRIU_ZERO_PAGES=0")
	stockEnv := envFile("stock.env", "CRYO_CRIU="+filepath.Join(stockDir, "criu"))

	bundle := zeroTmpfsBundle(t, filepath.Join(dir, "bundle"))
	root := filepath.Join(dir, "runc-root")
	id := "cryo-zerotmpfs-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id) })
	wrap := harness.CryoBin(t, "cryo-runc")
	out := harness.RwRunDetached(t, criuOf[on], wrap, "--cryo-env", on, "--root", root, "run", "-d", "--bundle", bundle, id)
	harness.WaitFor(t, 20*time.Second, "the app to tick", func() bool { return harness.RwLastTick(out.String()) >= 3 })
	files := zeroTmpfsFiles(t)
	writeTmpfsFiles(t, harness.RwInitPID(t, root, id), files)
	var nonzero int64
	for _, f := range files {
		nonzero += f.nonzero
	}
	slack := int64(1 << 20) // tar headers, the sparse maps, /dev's own tmpfs

	checkpoint := func(envFile, img string) string {
		start := time.Now()
		harness.Run(t, 5*time.Minute, criuOf[envFile], wrap, "--cryo-env", envFile, "--root", root, "checkpoint",
			"--image-path", img, "--work-path", img+".work", id)
		t.Logf("checkpoint (%s): %.1f s", filepath.Base(envFile), time.Since(start).Seconds())
		harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id)
		log, _ := os.ReadFile(filepath.Join(img+".work", "dump.log"))
		return string(log)
	}
	restore := func(envFile, img, what string) (map[string]int64, int64) {
		work := filepath.Join(dir, "rwork-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		start := time.Now()
		out := harness.RwRunDetached(t, criuOf[envFile], wrap, "--cryo-env", envFile, "--root", root, "restore", "-d",
			"--image-path", img, "--work-path", work, "--bundle", bundle, id)
		t.Logf("%s: %.1f s", what, time.Since(start).Seconds())
		harness.WaitFor(t, 20*time.Second, "the restored app to tick", func() bool { return harness.RwLastTick(out.String()) >= 0 })
		log, _ := os.ReadFile(filepath.Join(work, "restore.log"))
		if patched := strings.Contains(string(log), hugeFillLog); patched == (envFile == stockEnv) {
			t.Fatalf("%s: the restore log of %s has %q: %v (which CRIU ran?)", what, criuOf[envFile], hugeFillLog, patched)
		}
		alloc, used := checkTmpfsFiles(t, what, harness.RwInitPID(t, root, id), files)
		t.Logf("after %s: allocated %v bytes, /dev/shm uses %.1f MiB", what, alloc, float64(used)/(1<<20))
		return alloc, used
	}
	wantHoles := func(what string, alloc map[string]int64, used int64) {
		t.Helper()
		for _, f := range files {
			if alloc[f.name] > f.nonzero+64<<10 {
				t.Errorf("after %s, /dev/shm/%s has %d bytes allocated: want about its %d non-zero", what, f.name, alloc[f.name], f.nonzero)
			}
		}
		if used > nonzero+slack {
			t.Errorf("after %s, /dev/shm uses %d bytes: want at most %d (its non-zero pages and 1 MiB)", what, used, nonzero+slack)
		}
	}

	// cryo's CRIU: zeros as holes.
	img := filepath.Join(dir, "img")
	log := checkpoint(on, img)
	harness.WantIn(t, log, "archived as holes")
	gz, raw, sparse := tmpfsTars(t, img)
	t.Logf("tmpfs tars: %.2f MiB gzipped, %.2f MiB uncompressed, for %.2f MiB of non-zero pages", float64(gz)/(1<<20), float64(raw)/(1<<20), float64(nonzero)/(1<<20))
	if !sparse {
		t.Errorf("the tar does not hold /dev/shm/zeros as a sparse file (GNU.sparse.major=1)")
	}
	if raw > nonzero+slack {
		t.Errorf("tmpfs tars: %d bytes uncompressed, want at most %d (the non-zero pages and 1 MiB)", raw, nonzero+slack)
	}
	alloc, used := restore(on, img, "a restore by cryo's CRIU")
	wantHoles("a restore by cryo's CRIU", alloc, used)
	harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id)
	alloc, used = restore(stockEnv, img, "a restore by stock CRIU")
	wantHoles("a restore by stock CRIU", alloc, used)

	// CRYO_CRIU_ZERO_PAGES=0: stock CRIU's tar, zeros as data, restored
	// whole. The restored files have holes, which stock tar keeps: write
	// the zeros again.
	writeTmpfsFiles(t, harness.RwInitPID(t, root, id), files)
	img = filepath.Join(dir, "img-off")
	log = checkpoint(off, img)
	harness.WantIn(t, log, "zero pages archived as data (CRYO_CRIU_ZERO_PAGES=0)")
	gz, raw, sparse = tmpfsTars(t, img)
	t.Logf("tmpfs tars with CRYO_CRIU_ZERO_PAGES=0: %.2f MiB gzipped, %.2f MiB uncompressed", float64(gz)/(1<<20), float64(raw)/(1<<20))
	if sparse || raw < zeroTmpfsMiB<<20 {
		t.Errorf("CRYO_CRIU_ZERO_PAGES=0: tmpfs tars hold %d bytes uncompressed (sparse: %v), want the zeros as data", raw, sparse)
	}
	alloc, used = restore(on, img, "a restore of the opt-out image by cryo's CRIU")
	if alloc["zeros"] < zeroTmpfsMiB<<20 || used < zeroTmpfsMiB<<20 {
		t.Errorf("a tar of zeros as data restored into %d bytes (%d in /dev/shm): want the zeros written back", alloc["zeros"], used)
	}
}
