package criu

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// The workload of TestCRIUParallelFill: processes, threads in each, MiB each.
const (
	fillProcs   = 3
	fillThreads = 4
	fillMiB     = 160
)

// TestCRIUParallelFill: a container of three processes, each with four
// threads and 160 MiB of filled private memory, checkpointed and restored
// through cryo-runc, runc and cryo's CRIU. The restore fills each process's
// memory from four threads (CRYO_CRIU_FILL_THREADS=4): every process then
// finds its memory intact, with the pid and thread ids it had, and no fill
// thread remains. With CRYO_CRIU_FILL_THREADS=1 the restorer reads alone,
// as stock CRIU, with the same result.
func TestCRIUParallelFill(t *testing.T) {
	harness.RequireRoot(t)
	dir := t.TempDir()
	bundle := fillBundle(t, filepath.Join(dir, "bundle"))
	root := filepath.Join(dir, "runc-root")
	id := "cryo-fill-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id) })
	wrap := harness.CryoBin(t, "cryo-runc")
	env := func(name string, lines ...string) string {
		path := filepath.Join(dir, name)
		lines = append([]string{"CRYO_RUNC=/usr/sbin/runc"}, lines...)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	four, one := env("four.env", "CRYO_CRIU_FILL_THREADS=4"), env("one.env", "CRYO_CRIU_FILL_THREADS=1")

	out := harness.RwRunDetached(t, nil, wrap, "--cryo-env", four, "--root", root, "run", "-d", "--bundle", bundle, id)
	ids := fillWaitPasses(t, out, "the workload")
	for round, envFile := range []string{four, one} {
		img := filepath.Join(dir, "img"+strconv.Itoa(round))
		harness.Run(t, 5*time.Minute, nil, wrap, "--cryo-env", envFile, "--root", root, "checkpoint",
			"--image-path", img, "--work-path", img+".work", id)
		harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id)
		work := img + ".rwork"
		out = harness.RwRunDetached(t, nil, wrap, "--cryo-env", envFile, "--root", root, "restore", "-d",
			"--image-path", img, "--work-path", work, "--bundle", bundle, id)
		after := fillWaitPasses(t, out, "the restored workload")
		for p, was := range ids {
			if after[p] != was {
				t.Errorf("round %d: process %d is %q after the restore, was %q", round, p, after[p], was)
			}
		}
		log, _ := os.ReadFile(filepath.Join(work, "restore.log"))
		fillCheckLog(t, string(log), envFile == four)
		fillCheckThreads(t, harness.RwInitPID(t, root, id))
	}
}

// fillBundle is a runc bundle running testdata/filltree.c (built static).
func fillBundle(t *testing.T, dir string) string {
	t.Helper()
	harness.RwBundle(t, dir)
	harness.Run(t, time.Minute, nil, "gcc", "-O2", "-static", "-pthread", "-o", filepath.Join(dir, "rootfs/bin/filltree"),
		filepath.Join("../testdata", "filltree.c"))
	harness.SetArgs(t, dir, "/bin/filltree", strconv.Itoa(fillMiB), strconv.Itoa(fillProcs), strconv.Itoa(fillThreads))
	return dir
}

var fillLine = regexp.MustCompile(`proc (\d+) (pid \d+ tids [\d,]+) pass \d+ (ok|BAD)`)

// fillWaitPasses waits until every process of the workload has checked its
// memory once, fails on a BAD check, and returns each one's pid and tids.
func fillWaitPasses(t *testing.T, out *testsupport.Buffer, what string) map[int]string {
	t.Helper()
	ids := map[int]string{}
	harness.WaitFor(t, 2*time.Minute, what+" to check its memory in every process", func() bool {
		for _, m := range fillLine.FindAllStringSubmatch(out.String(), -1) {
			if m[3] == "BAD" {
				t.Fatalf("%s: process %s found its memory changed: %s", what, m[1], m[0])
			}
			p, _ := strconv.Atoi(m[1])
			ids[p] = m[2]
		}
		return len(ids) == fillProcs
	})
	return ids
}

var fillLogLine = regexp.MustCompile(`parallel fill: (\d+) MiB in \d+ pieces by (\d+) threads`)

// fillCheckLog checks CRIU's restore log: with four threads, each process's
// memory was filled by four; with one, by the restorer alone.
func fillCheckLog(t *testing.T, log string, four bool) {
	t.Helper()
	if !strings.Contains(log, hugeFillLog) {
		t.Fatalf("runc ran a stock CRIU, not cryo's patched build (contrib/criu): run `make deps`, and put /usr/local/sbin first in PATH")
	}
	fills := fillLogLine.FindAllStringSubmatch(log, -1)
	if !four {
		harness.WantIn(t, log, "parallel fill: off (one thread)")
		if len(fills) != 0 {
			t.Errorf("CRYO_CRIU_FILL_THREADS=1: the restore still filled in parallel: %v", fills)
		}
		return
	}
	harness.WantIn(t, log, "parallel fill: on (4 threads a task")
	if len(fills) != fillProcs {
		t.Fatalf("want a parallel fill in each of the %d processes, the restore log has %d:\n%s", fillProcs, len(fills), harness.Tail(log, 40))
	}
	for _, f := range fills {
		t.Logf("restore log: %s", f[0])
		if mib, _ := strconv.Atoi(f[1]); mib < fillMiB || f[2] != "4" {
			t.Errorf("want at least %d MiB filled by 4 threads (their pids are free in the container), got %q", fillMiB, f[0])
		}
	}
}

// fillCheckThreads: the init process and each of its children have the
// workload's threads and no more (every fill thread exited).
func fillCheckThreads(t *testing.T, initPID int) {
	t.Helper()
	pids := []int{initPID}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(initPID) + "/task/" + strconv.Itoa(initPID) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		pids = append(pids, n)
	}
	if len(pids) != fillProcs {
		t.Fatalf("the restored container has %d processes, want %d", len(pids), fillProcs)
	}
	for _, p := range pids {
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != fillThreads {
			t.Errorf("process %d has %d threads after the restore, want %d", p, len(tasks), fillThreads)
		}
	}
}
