package digest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// stampedImage writes a small image directory with its digests, and points
// the stamps at a fresh directory of the test.
func stampedImage(t *testing.T) (string, map[string]string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("stamps count only in a root-owned directory; run as root")
	}
	recs = Records{Dir: filepath.Join(t.TempDir(), "verified")}
	dir := t.TempDir()
	writeFileT(t, filepath.Join(dir, "inventory.img"), "inventory")
	writeFileT(t, filepath.Join(dir, "pages-1.img"), "pages pages pages")
	d, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := recs.Stamp(dir, d); err != nil {
		t.Fatal(err)
	}
	return dir, d
}

func TestStampSkipsUnchanged(t *testing.T) {
	dir, d := stampedImage(t)
	used, err := recs.VerifyStampedWith(dir, d, nil)
	if err != nil || !used {
		t.Fatalf("unchanged image: stamp used %v, err %v; want used", used, err)
	}
	recs.Full = true
	if used, err := recs.VerifyStampedWith(dir, d, nil); err != nil || used {
		t.Fatalf("CRYO_VERIFY=full: stamp used %v, err %v; want a full verification", used, err)
	}
}

// A byte rewritten in place, even with the same size and mtime put back,
// changes the ctime: the stamp no longer holds and the hash catches it.
func TestStampDetectsRewrite(t *testing.T) {
	dir, d := stampedImage(t)
	path := filepath.Join(dir, "pages-1.img")
	st, _ := os.Stat(path)
	time.Sleep(10 * time.Millisecond)
	writeFileT(t, path, "pages PAGES pages")
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	_, err := recs.VerifyStampedWith(dir, d, nil)
	var cf *CorruptFileError
	if !errors.As(err, &cf) || cf.File != "pages-1.img" {
		t.Fatalf("rewritten file: got %v, want a CorruptFileError for pages-1.img", err)
	}
}

// A file added next to a stamped image is still refused.
func TestStampStillChecksCoverage(t *testing.T) {
	dir, d := stampedImage(t)
	writeFileT(t, filepath.Join(dir, "extra.img"), "x")
	if _, err := recs.VerifyStampedWith(dir, d, nil); err == nil {
		t.Fatal("an image file not covered by the digests was accepted")
	}
}

// A stamp directory others can write to is not trusted.
func TestStampUntrustedDir(t *testing.T) {
	dir, d := stampedImage(t)
	if err := os.Chmod(recs.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if used, err := recs.VerifyStampedWith(dir, d, nil); err != nil || used {
		t.Fatalf("world-writable stamp directory: stamp used %v, err %v; want a full verification", used, err)
	}
}

// The stamp of a verified directory makes the next verification skip.
func TestVerifyStamps(t *testing.T) {
	dir, d := stampedImage(t)
	recs = Records{Dir: filepath.Join(t.TempDir(), "other")}
	if used, _ := recs.VerifyStampedWith(dir, d, nil); used {
		t.Fatal("used a stamp from another directory")
	}
	if used, err := recs.VerifyStampedWith(dir, d, nil); err != nil || !used {
		t.Fatalf("second verification: stamp used %v, err %v; want used", used, err)
	}
}

// The stamp directory keeps at most maxStamps records, the newest.
func TestStampPrune(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("run as root")
	}
	dir := filepath.Join(t.TempDir(), "verified")
	recs = Records{Dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for i := 0; i < maxStamps+5; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%04d.json", i))
		writeFileT(t, p, "{}")
		_ = os.Chtimes(p, old, old.Add(time.Duration(i)*time.Second))
	}
	stale := filepath.Join(dir, "stale.json")
	writeFileT(t, stale, "{}")
	_ = os.Chtimes(stale, old, time.Now().Add(-stampMaxAge-time.Hour))
	recs.pruneStamps()
	entries, _ := os.ReadDir(dir)
	if len(entries) != maxStamps {
		t.Fatalf("%d stamps left, want %d", len(entries), maxStamps)
	}
	for _, gone := range []string{"0000.json", "0004.json", "stale.json"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); err == nil {
			t.Errorf("%s was kept", gone)
		}
	}
}

// On tmpfs a write through a shared mapping changes a file without moving
// its mtime or ctime: no stamp is written or trusted there, so the hash
// catches the change.
func TestStampNotOnTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	recs = Records{Dir: filepath.Join(t.TempDir(), "verified")}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	path := filepath.Join(dir, "pages-1.img")
	writeFileT(t, path, "pages pages pages")
	d, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := recs.Stamp(dir, d); err != nil {
		t.Fatal(err)
	}
	if used, err := recs.VerifyStampedWith(dir, d, nil); err != nil || used {
		t.Fatalf("tmpfs: stamp used %v, err %v; want a full verification", used, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 5, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	copy(mem, "PAGES")
	syscall.Munmap(mem)
	var cf *CorruptFileError
	if _, err := recs.VerifyStampedWith(dir, d, nil); !errors.As(err, &cf) {
		t.Fatalf("a write through a mapping on tmpfs: got %v, want a CorruptFileError", err)
	}
}

// A full verification that fails drops the stamp, so that the next restore
// hashes again.
func TestStampDroppedOnFailure(t *testing.T) {
	dir, d := stampedImage(t)
	recs.Full = true
	writeFileT(t, filepath.Join(dir, "pages-1.img"), "pages PAGES pages")
	if _, err := recs.VerifyStampedWith(dir, d, nil); err == nil {
		t.Fatal("a changed file verified")
	}
	path, _ := recs.stampPath(dir, d)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stamp is still there after a failed verification: %v", err)
	}
}

// recs are the records of the running test; each test sets its own.
var recs Records

// sharedMap maps path writable and shared, as an attacker's process
// would; the mapping holds the file open for writing until it goes.
func sharedMap(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	return mem
}

// poke writes b[i] = v. Not inlined: the compiler would drop a store of
// the byte just read from the same place.
//
//go:noinline
func poke(b []byte, i int, v byte) { b[i] = v }

func ctimeOf(t *testing.T, path string) int64 {
	t.Helper()
	id, err := identify(path)
	if err != nil {
		t.Fatal(err)
	}
	return id.Ctime
}

// The attack: a shared mapping dirties a page with the byte it holds
// before a verification hashes the file; after it, the mapping writes
// another byte into the still dirty page, which moves neither mtime nor
// ctime (no write fault: see lease.go). The verification must not have
// stamped the file, so the next one hashes it and finds the change.
func TestStampSharedMappingWrite(t *testing.T) {
	dir, d := stampedImage(t)
	if !timesTrack(dir) {
		t.Skipf("%s is not on ext4, XFS or Btrfs, where stamps are taken", dir)
	}
	path := filepath.Join(dir, "pages-1.img")
	mem := sharedMap(t, path)
	poke(mem, 6, mem[6]) // the write that faults: the page is dirty from now on
	if used, err := recs.VerifyStampedWith(dir, d, nil); err != nil || used {
		t.Fatalf("after the first write: stamp used %v, err %v; want a full verification that passes", used, err)
	}
	before := ctimeOf(t, path)
	time.Sleep(20 * time.Millisecond)
	poke(mem, 6, 'P')
	if ctimeOf(t, path) != before {
		t.Fatal("the write into the dirty page moved ctime: the premise of this test does not hold here")
	}
	var cf *CorruptFileError
	if used, err := recs.VerifyStampedWith(dir, d, nil); !errors.As(err, &cf) {
		t.Fatalf("a byte changed through a shared mapping: stamp used %v, err %v; want a CorruptFileError", used, err)
	}
}

// No stamp is written while an image file is open for writing, and one
// written before is not trusted while it is.
func TestStampRefusedWhileOpenForWriting(t *testing.T) {
	dir, d := stampedImage(t)
	if !timesTrack(dir) {
		t.Skipf("%s is not on ext4, XFS or Btrfs, where stamps are taken", dir)
	}
	w, err := os.OpenFile(filepath.Join(dir, "inventory.img"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if used, err := recs.VerifyStampedWith(dir, d, nil); err != nil || used {
		t.Fatalf("a file open for writing: stamp used %v, err %v; want a full verification", used, err)
	}
	if err := recs.Stamp(dir, d); err == nil {
		t.Fatal("stamped an image with a file open for writing")
	}
	// It wrote nothing: once it is gone, the first stamp holds again.
	w.Close()
	if used, err := recs.VerifyStampedWith(dir, d, nil); err != nil || !used {
		t.Fatalf("after the writer closed: stamp used %v, err %v; want the stamp", used, err)
	}
}

// An open for writing while the leases are held (here non-blocking, which
// breaks them and returns at once) keeps the verification from stamping.
func TestStampNotWrittenAfterLeaseBreak(t *testing.T) {
	dir, d := stampedImage(t)
	if !timesTrack(dir) {
		t.Skipf("%s is not on ext4, XFS or Btrfs, where stamps are taken", dir)
	}
	held, err := recs.quiesce(dir, d)
	if err != nil {
		t.Fatalf("no leases on a quiet image: %v", err)
	}
	defer held.release()
	_, err = os.OpenFile(filepath.Join(dir, "pages-1.img"), os.O_RDWR|syscall.O_NONBLOCK, 0)
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("open for writing under a read lease: %v, want EWOULDBLOCK", err)
	}
	if held.intact() {
		t.Fatal("the leases still read as held after an open for writing")
	}
	if err := recs.writeStamp(dir, d, held); err == nil {
		t.Fatal("stamped after an open for writing broke a lease")
	}
}

// A stamp of the format before the leases is not trusted.
func TestStampOldFormatIgnored(t *testing.T) {
	dir, d := stampedImage(t)
	path, _ := recs.stampPath(dir, d)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	delete(s, "version")
	data, _ = json.Marshal(s)
	writeFileT(t, path, string(data))
	if used, err := recs.VerifyStampedWith(dir, d, nil); err != nil || used {
		t.Fatalf("a stamp without a version: used %v, err %v; want a full verification", used, err)
	}
}
