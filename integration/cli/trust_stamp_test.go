package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"golang.org/x/sys/unix"
)

// ext4Dir is a fresh directory on ext4: the test's temporary directory, or
// one under /var/tmp where /tmp is a tmpfs. Elsewhere the test is skipped:
// what it reproduces is how ext4 stamps a file's times.
func ext4Dir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if fsMagic(t, dir) != unix.EXT4_SUPER_MAGIC {
		var err error
		if dir, err = os.MkdirTemp("/var/tmp", "cryo-trust-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	if fsMagic(t, dir) != unix.EXT4_SUPER_MAGIC {
		t.Skipf("neither %s nor /var/tmp is on ext4", os.TempDir())
	}
	return dir
}

func fsMagic(t *testing.T, dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Type)
}

// fileTimes is a file's mtime and ctime, in nanoseconds.
func fileTimes(t *testing.T, path string) [2]int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return [2]int64{st.Mtim.Nano(), st.Ctim.Nano()}
}

// sharedMapping maps path MAP_SHARED and writable, as the attacker's
// process would; the mapping outlives the descriptor.
func sharedMapping(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

// TestTrustStampSharedMapping: the pages of a checkpoint are edited
// through a shared mapping after a restore verified them, and the next
// restore must refuse them.
//
// What ext4 does (kernel 6.18, measured on the test machine): the first
// write to a page of a MAP_SHARED mapping faults, and the fault
// (page_mkwrite) sets mtime and ctime. Later writes to that page, while it
// stays dirty, reach the page cache without a fault and move neither time.
// The page stays dirty until writeback cleans it (after
// vm.dirty_expire_centisecs, 30 s by default, or sooner on a sync or under
// others' dirty data; FADV_DONTNEED or msync clean it at once), and only
// then does the next write fault again. So the attacker dirties a page
// with the byte it already holds before the first restore hashes the image
// (the bytes are still the checkpoint's, and the restore verifies and,
// before the fix, stamps them with the times that write set); once that
// restore is over, the same mapping writes another byte into the still
// dirty page, and the times stay as stamped. Neither cryo's hashing nor
// CRIU's restore cleans the page on the way: the test checks that the
// times did not move.
func TestTrustStampSharedMapping(t *testing.T) {
	harness.RequireRoot(t)
	env := []string{"CRYO_STAMP_DIR=" + filepath.Join(t.TempDir(), "verified")}
	p := bareStartCounter(t)
	img := filepath.Join(ext4Dir(t), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	pages := largestPages(t, img)

	mem := sharedMapping(t, pages)
	off := len(mem) / 2
	orig := mem[off]
	// Writeback cleans the page on its own (a sync of the whole machine,
	// the flusher under others' dirty data), and then the attacker's next
	// write faults and moves the times: the attacker tries again.
	for try := 1; ; try++ {
		poke(mem, off, orig) // the write that faults: the page is dirty from now on
		dirtied := fileTimes(t, pages)
		harness.BareRestoredPID(t, env, img) // the bytes are the checkpoint's: it verifies
		killDumped(t, p)
		os.Remove(filepath.Join(img, "criu-restore.log"))
		poke(mem, off, orig^0xff)
		now := fileTimes(t, pages)
		if now == dirtied {
			break
		}
		if try == 5 {
			t.Fatalf("in %d tries, the write into the dirty page moved the times each time (last %v → %v): the page was always written back meanwhile, or the kernel does not behave as this test expects", try, dirtied, now)
		}
		t.Logf("try %d: the page was written back before the second write (times %v → %v); again", try, dirtied, now)
	}
	start := time.Now()
	out := harness.BareCryoFails(t, env, "restore", "--dir", img)
	t.Logf("refused in %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	harness.WantIn(t, out, "checkpoint image file "+filepath.Base(pages)+" is corrupt: sha256 mismatch", "nothing was restored")
	bareNotRestored(t, p, img)
}

// TestTrustStampMappingAfterStamp: a mapping made after the stamp faults
// on its first write, which moves ctime: the stamp no longer holds and the
// restore hashes, and refuses, the edited pages.
func TestTrustStampMappingAfterStamp(t *testing.T) {
	harness.RequireRoot(t)
	env := []string{"CRYO_STAMP_DIR=" + filepath.Join(t.TempDir(), "verified")}
	p := bareStartCounter(t)
	img := filepath.Join(ext4Dir(t), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	pages := largestPages(t, img)
	stamped := fileTimes(t, pages)
	time.Sleep(10 * time.Millisecond) // past the clock tick of the checkpoint's last change
	mem := sharedMapping(t, pages)
	poke(mem, len(mem)/2, mem[len(mem)/2]^0xff)
	if fileTimes(t, pages) == stamped {
		t.Fatal("the first write through a new mapping left the times as they were")
	}
	out := harness.BareCryoFails(t, env, "restore", "--dir", img)
	harness.WantIn(t, out, "checkpoint image file "+filepath.Base(pages)+" is corrupt: sha256 mismatch", "nothing was restored")
	bareNotRestored(t, p, img)
}

// poke writes b[i] = v through the mapping. Not inlined: the compiler
// would drop a store of the byte just read from the same place.
//
//go:noinline
func poke(b []byte, i int, v byte) { b[i] = v }

// TestTrustStampShortcutKept: with nobody writing, the shortcut still
// holds: the checkpoint's stamp (a file of the stamp directory, not of the
// image) spares a later restore the hashing, whose line then counts no
// bytes; CRYO_VERIFY=full hashes all the same.
func TestTrustStampShortcutKept(t *testing.T) {
	harness.RequireRoot(t)
	stamps := filepath.Join(t.TempDir(), "verified")
	env := []string{"CRYO_STAMP_DIR=" + stamps}
	p := bareStartCounter(t)
	img := filepath.Join(ext4Dir(t), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	if entries, _ := os.ReadDir(stamps); len(entries) != 1 {
		t.Fatalf("%d stamps after the checkpoint, want 1", len(entries))
	}
	// CRYO_VERIFY=full hashes, and its line says how much.
	out := harness.Run(t, harness.BareTimeout, append(env, "CRYO_VERIFY=full"), harness.CryoBin(t, "cryo"), "restore", "--dir", img)
	if !strings.Contains(verifiedLine(t, out), "B") {
		t.Fatalf("CRYO_VERIFY=full: the verifying line counts no bytes:\n%s", out)
	}
	killDumped(t, p)
	out = harness.Run(t, harness.BareTimeout, env, harness.CryoBin(t, "cryo"), "restore", "--dir", img)
	if strings.Contains(verifiedLine(t, out), "B") {
		t.Fatalf("the restore hashed an image stamped on this host:\n%s", out)
	}
}

// verifiedLine is the end of the line that says the verification is done.
func verifiedLine(t *testing.T, out string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(l, "verifying checkpoint done"); ok {
			return rest
		}
	}
	t.Fatalf("no verification in:\n%s", out)
	return ""
}

// largestPages is the largest pages image of img: the process's memory.
func largestPages(t *testing.T, img string) string {
	t.Helper()
	all, _ := filepath.Glob(filepath.Join(img, "pages-*.img"))
	var best string
	var size int64
	for _, p := range all {
		if st, err := os.Stat(p); err == nil && st.Size() > size {
			best, size = p, st.Size()
		}
	}
	if best == "" {
		t.Fatalf("no pages image in %s", img)
	}
	return best
}
