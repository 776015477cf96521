package criu

import (
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestCRIUHugeFill: cryo's CRIU (contrib/criu/patches, built by `make
// deps`) passes `criu check`, and restores a process with a filled region,
// a sparse one, a MADV_NOHUGEPAGE one and a partly filled one with the same
// memory, the same memory map and the same advice (smaps VmFlags), filling
// with huge pages where THP is in "madvise" mode and from several threads (a helper whose pid is taken
// takes another); with CRYO_CRIU_HUGE_FILL=0 and CRYO_CRIU_FILL_THREADS=1 it
// restores as stock CRIU.
func TestCRIUHugeFill(t *testing.T) {
	criu := harness.PatchedCRIU(t)
	harness.WantIn(t, harness.Run(t, 30*time.Second, nil, criu, "check"), "Looks good")

	p := harness.StartHugefill(t, 384)
	sums, lines, flags := p.Sums(t), p.MapsLines(t), p.Smaps(t)
	img := t.TempDir()
	p.CRIUDump(t, criu, img)

	_, log := harness.CRIURestore(t, criu, img, nil)
	if !strings.Contains(log, hugeFillLog) {
		t.Fatalf("%s is stock CRIU, not cryo's patched build (contrib/criu): run `make deps` (contrib/install-deps.sh), or set CRYO_CRIU to a patched CRIU", criu)
	}
	p.WantSame(t, "restored", sums, lines)
	got := p.Smaps(t)
	for _, r := range []string{"nohuge", "partial", "sparse"} {
		t.Logf("%s: VmFlags %v, AnonHugePages %d kB", r, got[r].VmFlags, got[r].AnonHugeK)
	}
	if !got["nohuge"].Has("nh") || got["nohuge"].AnonHugeK != 0 {
		t.Errorf("the MADV_NOHUGEPAGE region lost its advice: %+v", got["nohuge"])
	}
	if got["sparse"].AnonHugeK != 0 || strings.Join(got["sparse"].VmFlags, " ") != strings.Join(flags["sparse"].VmFlags, " ") {
		t.Errorf("the sparse region changed: %+v, was %+v", got["sparse"], flags["sparse"])
	}
	switch mode := harness.ThpMode(); mode {
	case "never":
		t.Logf("transparent huge pages are \"never\" here: no huge page to check")
		harness.WantIn(t, log, hugeFillLog+"off")
	case "always":
		harness.WantIn(t, log, hugeFillLog+"off (THP mode is not madvise")
		if got["filled"].AnonHugeK == 0 {
			t.Errorf("THP always: the filled region has no huge pages: %+v", got["filled"])
		}
	default:
		harness.WantIn(t, log, hugeFillLog+"on")
		if f := got["filled"]; f.AnonHugeK == 0 {
			t.Errorf("the filled region was not filled with huge pages (want AnonHugePages > 0): %+v", f)
		}
		if f := got["partial"]; f.AnonHugeK == 0 {
			t.Errorf("the partly filled region: want huge pages where it was full: %+v", f)
		}
	}
	// The huge pages are moved into place: no region gains advice.
	for r, was := range flags {
		if strings.Join(got[r].VmFlags, " ") != strings.Join(was.VmFlags, " ") {
			t.Errorf("restored: %s has VmFlags %v, was dumped with %v", r, got[r].VmFlags, was.VmFlags)
		}
	}

	wantParallelFill(t, log, 1, fillThreadsDefault())

	// A second checkpoint of the restored process: the filled region is
	// filled with huge pages again, every region still without advice it
	// did not have. The pid of
	// the first fill helper (the one after the process's) is taken by
	// another process this time: the helper skips it and takes the next
	// free pid of its block, so the fill has all its threads.
	img2 := t.TempDir()
	p.CRIUDump(t, criu, img2)
	taken := fillThreadsDefault() > 1 && occupyPid(t, p.PID+1)
	_, log = harness.CRIURestore(t, criu, img2, nil)
	p.WantSame(t, "dumped and restored again", sums, lines)
	if taken {
		wantParallelFill(t, log, fillThreadsDefault(), fillThreadsDefault())
	}
	again := p.Smaps(t)
	for r, was := range got {
		if strings.Join(again[r].VmFlags, " ") != strings.Join(was.VmFlags, " ") {
			t.Errorf("restored again: %s has VmFlags %v, had %v after the first restore", r, again[r].VmFlags, was.VmFlags)
		}
	}
	if harness.ThpMode() != "never" && again["filled"].AnonHugeK == 0 {
		t.Errorf("restored again: the filled region has no huge pages: %+v", again["filled"])
	}

	// The opt-outs: the first image restores as stock CRIU restores it.
	p.Kill(t)
	_, log = harness.CRIURestore(t, criu, img, []string{"CRYO_CRIU_HUGE_FILL=0", "CRYO_CRIU_FILL_THREADS=1"})
	harness.WantIn(t, log, hugeFillLog+"off (CRYO_CRIU_HUGE_FILL=0)", "parallel fill: off (one thread)")
	p.WantSame(t, "restored with CRYO_CRIU_HUGE_FILL=0", sums, lines)
	got = p.Smaps(t)
	for r, was := range flags {
		if strings.Join(got[r].VmFlags, " ") != strings.Join(was.VmFlags, " ") {
			t.Errorf("CRYO_CRIU_HUGE_FILL=0: %s has VmFlags %v, was %v", r, got[r].VmFlags, was.VmFlags)
		}
		if harness.ThpMode() == "madvise" && got[r].AnonHugeK != 0 {
			t.Errorf("CRYO_CRIU_HUGE_FILL=0: %s has %d kB of huge pages", r, got[r].AnonHugeK)
		}
	}
}

// fillThreadsDefault is how many threads cryo's CRIU fills a large process's
// memory with by default: the online CPUs, at most 8.
func fillThreadsDefault() int { return min(runtime.NumCPU(), 8) }

// wantParallelFill checks that the restore log shows the one process's
// memory filled by lo to hi threads. This process runs in the host's pid
// namespace, where any process of the host may hold pids of the helpers'
// block; the helpers skip those, and only a block used up means fewer
// threads (the container test, TestCRIUParallelFill, checks the exact
// count).
func wantParallelFill(t *testing.T, log string, lo, hi int) {
	t.Helper()
	if fillThreadsDefault() < 2 {
		harness.WantIn(t, log, "parallel fill: off (one thread)")
		return
	}
	m := regexp.MustCompile(`parallel fill: \d+ MiB in \d+ pieces by (\d+) threads`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no parallel fill in the restore log:\n%s", harness.Tail(log, 30))
	}
	t.Logf("restore log: %s", m[0])
	if n, _ := strconv.Atoi(m[1]); n < lo || n > hi {
		t.Errorf("restore log: %q, want %d to %d threads", m[0], lo, hi)
	}
}

// occupyPid starts a process at pid (through ns_last_pid), killed at the
// end of the test; false if another process took that pid first.
func occupyPid(t *testing.T, pid int) bool {
	t.Helper()
	for try := 0; try < 5; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if cmd.Process.Pid == pid {
			return true
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
	t.Logf("could not start a process at pid %d: the taken-pid case is not checked", pid)
	return false
}
