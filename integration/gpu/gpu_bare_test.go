package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"golang.org/x/sys/unix"
)

// TestGPUSuspendResumeInPlace: `cryo cuda suspend` then `cryo cuda resume`
// on a live CUDA process; its memory and counter carry on.
func TestGPUSuspendResumeInPlace(t *testing.T) {
	gpuOrSkip(t)
	cryo, app := harness.CryoBin(t, "cryo"), cudamemBin(t)
	logPath := filepath.Join(t.TempDir(), "app.log")
	cmd := startDetached(t, logPath, app, harness.GPUMiB(), "100")
	pid := cmd.Process.Pid
	defer killPid(pid)
	n := harness.WaitTicks(t, func() string { return harness.ReadFile(logPath) }, 2, "the workload's first ticks")
	used := gpuMemoryUsedMiB(t)

	report(t, "suspend", harness.Timed(t, nil, cryo, "cuda", "suspend", strconv.Itoa(pid)))
	if st := harness.Run(t, time.Minute, nil, cryo, "cuda", "state", strconv.Itoa(pid)); !strings.Contains(st, "checkpointed") {
		t.Fatalf("state after suspend: %s", st)
	}
	freed := gpuMemoryUsedMiB(t)
	t.Logf("GPU memory used: %d MiB before suspend, %d MiB while suspended", used, freed)
	if used >= 0 && freed >= used {
		t.Errorf("suspend freed no GPU memory (%d → %d MiB)", used, freed)
	}
	time.Sleep(500 * time.Millisecond)
	held := harness.LastTick(t, harness.ReadFile(logPath))

	report(t, "resume", harness.Timed(t, nil, cryo, "cuda", "resume", strconv.Itoa(pid)))
	after := harness.WaitTicks(t, func() string { return harness.ReadFile(logPath) }, held, "ticks after resume")
	t.Logf("ticks: %d before suspend, %d while suspended, %d after resume", n, held, after)
}

// TestGPUBareCheckpointRestore: `cryo checkpoint --pid` then `cryo restore`,
// and the same image restored a second time; compared with the raw sequence
// (driver suspend, then CRIU) run side by side.
func TestGPUBareCheckpointRestore(t *testing.T) {
	gpuOrSkip(t)
	reapOrphans(t)
	cryo, app := harness.CryoBin(t, "cryo"), cudamemBin(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "app.log")
	cmd := startDetached(t, logPath, app, harness.GPUMiB(), "100")
	pid := cmd.Process.Pid
	defer killPid(pid)
	harness.WaitTicks(t, func() string { return harness.ReadFile(logPath) }, 2, "the workload's first ticks")

	img := filepath.Join(dir, "img")
	report(t, "cryo checkpoint", harness.Timed(t, nil, cryo, "checkpoint", "--pid", strconv.Itoa(pid), "--dir", img))
	harness.WaitFor(t, 10*time.Second, "the checkpointed process to exit", func() bool { return !procfs.Alive(pid) })
	atDump := harness.LastTick(t, harness.ReadFile(logPath))
	size := fileSize(t, logPath)

	for round := 1; round <= 2; round++ {
		// The image records the log's size at the dump; put it back as it
		// was, as a restore on another host would find it.
		if err := os.Truncate(logPath, size); err != nil {
			t.Fatal(err)
		}
		report(t, "cryo restore", harness.Timed(t, nil, cryo, "restore", "--dir", img))
		next := harness.WaitTicks(t, func() string { return harness.ReadFile(logPath) }, atDump, "ticks after restore")
		t.Logf("restore %d: tick %d at the dump, %d now", round, atDump, next)
		killPid(pid)
		// The restored process is an orphan of CRIU, reparented to this
		// test (a subreaper): reap it so that its pid is free again.
		_, _ = unix.Wait4(pid, nil, 0, nil)
		harness.WaitFor(t, 30*time.Second, "the restored process to be reaped", func() bool { return !procfs.Exists(pid) })
	}
	rawBaseline(t, cryo, app, dir)
}

// rawBaseline times the raw sequence cryo replaces: the driver's suspend,
// CRIU dump, CRIU restore, the driver's resume, with no manifest, digests or
// checks.
func rawBaseline(t *testing.T, cryo, app, dir string) {
	logPath := filepath.Join(dir, "raw.log")
	cmd := startDetached(t, logPath, app, harness.GPUMiB(), "100")
	pid := cmd.Process.Pid
	defer killPid(pid)
	harness.WaitTicks(t, func() string { return harness.ReadFile(logPath) }, 2, "the raw workload's first ticks")
	img := filepath.Join(dir, "raw-img")
	if err := os.MkdirAll(img, 0o700); err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(pid)
	d := harness.Timed(t, nil, cryo, "cuda", "suspend", p)
	d += harness.Timed(t, nil, "criu", "dump", "-t", p, "-D", img, "-o", "dump.log")
	report(t, "raw checkpoint (driver + criu dump)", d)
	d = harness.Timed(t, nil, "criu", "restore", "-d", "-D", img, "-o", "restore.log")
	d += harness.Timed(t, nil, cryo, "cuda", "resume", p)
	report(t, "raw restore (criu restore + driver)", d)
	harness.WaitTicks(t, func() string { return harness.ReadFile(logPath) }, 2, "raw ticks after restore")
}

// reapOrphans makes this test the subreaper of the processes that CRIU
// restores detached, for the length of the test, so that it can reap them.
func reapOrphans(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Logf("cannot become a subreaper: %v", err)
		return
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
