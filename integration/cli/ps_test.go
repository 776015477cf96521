package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/status"
)

// psEnv is the fake driver with a lock directory of the test's own, so
// that the pause records and locks of tests running beside it stay out of
// its view.
func psEnv(t *testing.T, faults string) (env []string, lockDir string) {
	lockDir = filepath.Join(t.TempDir(), "locks")
	return append(harness.FakeDriverEnv(t, faults), "CRYO_LOCK_DIR="+lockDir), lockDir
}

// psJSON runs `cryo ps --json`, which must answer well within its
// deadline, and returns its processes by pid.
func psJSON(t *testing.T, env []string, args ...string) (*status.Report, map[int]status.Process) {
	t.Helper()
	start := time.Now()
	out, err := harness.RunErr(20*time.Second, env, harness.CryoBin(t, "cryo"), append([]string{"ps", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("cryo ps --json: %v\n%s", err, out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("cryo ps took %s", d)
	}
	var r status.Report
	// stderr may carry notes; the document starts at its first brace.
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &r); err != nil {
		t.Fatalf("cryo ps --json is not JSON: %v\n%s", err, out)
	}
	byPID := map[int]status.Process{}
	for _, p := range r.Processes {
		byPID[p.PID] = p
	}
	return &r, byPID
}

// psRow is the table row of pid, failing when there is none.
func psRow(t *testing.T, env []string, pid int) string {
	t.Helper()
	out := harness.Run(t, 20*time.Second, env, harness.CryoBin(t, "cryo"), "ps")
	if !strings.HasPrefix(out, "PID") {
		t.Fatalf("cryo ps has no header:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == strconv.Itoa(pid) {
			return line
		}
	}
	t.Fatalf("cryo ps has no row for pid %d:\n%s", pid, out)
	return ""
}

func wantRow(t *testing.T, row string, pattern string) {
	t.Helper()
	if !regexp.MustCompile(pattern).MatchString(row) {
		t.Fatalf("cryo ps row %q does not match %q", row, pattern)
	}
}

// A running process, one suspended by `cryo cuda suspend`, one locked
// through the driver, one a suspend is working on (its checkpoint hangs),
// and one whose driver does not answer: `cryo ps` shows each, in its table,
// its JSON and -q, and never waits longer than its deadline.
func TestPsBareStates(t *testing.T) {
	harness.RequireRoot(t)
	faults := t.TempDir()
	env, lockDir := psEnv(t, faults)
	running := harness.BareStartFakeApp(t, env, nil)
	suspended := harness.BareStartFakeApp(t, env, nil)
	locked := harness.BareStartFakeApp(t, env, nil)
	harness.BareCryo(t, env, "cuda", "suspend", strconv.Itoa(suspended.PID))
	t.Cleanup(func() {
		harness.RunErr(time.Minute, env, harness.CryoBin(t, "cryo"), "cuda", "resume", strconv.Itoa(suspended.PID))
	})

	d := cuda.New(cuda.Options{LibPath: harness.FakeFile(t, "libcuda.so.1"), CallTimeout: 10 * time.Second})
	if err := d.Lock(context.Background(), locked.PID, 5*time.Second); err != nil {
		t.Fatalf("lock pid %d through the driver: %v", locked.PID, err)
	}
	t.Cleanup(func() { d.Unlock(context.Background(), locked.PID) })

	r, procs := psJSON(t, env)
	for pid, want := range map[int]string{running.PID: "running", suspended.PID: "checkpointed", locked.PID: "locked"} {
		if p := procs[pid]; p.State != want || p.Command != "fakecuda-app" || p.Frozen {
			t.Fatalf("cryo ps --json, pid %d: %+v, want %s", pid, p, want)
		}
	}
	if p := procs[suspended.PID]; !p.Stopped || procs[running.PID].Stopped {
		t.Fatalf("stopped: suspended %v, running %v; want true, false", p.Stopped, procs[running.PID].Stopped)
	}
	if p := procs[running.PID]; len(p.GPUs) != 1 || p.GPUs[0].Index != 0 || p.GPUMemory != 1<<20 {
		t.Fatalf("running pid's GPUs %+v, memory %d; want GPU 0 with 1 MiB", p.GPUs, p.GPUMemory)
	}
	if len(r.Locks) != 0 || len(r.Pauses) != 0 {
		t.Fatalf("locks %+v, pauses %+v in a fresh lock directory %s", r.Locks, r.Pauses, lockDir)
	}
	wantRow(t, psRow(t, env, running.PID), `^\d+\s+-\s+running\s+0\s+1\.0 MiB\s+-$`)
	wantRow(t, psRow(t, env, suspended.PID), `stopped, CUDA checkpointed: run cryo recover `+strconv.Itoa(suspended.PID))
	wantRow(t, psRow(t, env, locked.PID), `\slocked\s`)
	q := harness.Run(t, 20*time.Second, env, harness.CryoBin(t, "cryo"), "ps", "-q")
	for _, p := range []*harness.BareProc{running, suspended, locked} {
		if !regexp.MustCompile(`(?m)^` + strconv.Itoa(p.PID) + `$`).MatchString(q) {
			t.Fatalf("cryo ps -q lacks pid %d:\n%s", p.PID, q)
		}
	}

	psBusy(t, env, faults, running)
	psNoAnswer(t, env, faults, running)
}

// psBusy: while `cryo cuda suspend` hangs in the driver's checkpoint of p,
// `cryo ps` says p is busy (its helper traces it) and that a suspend holds
// its lock, without waiting for it.
func psBusy(t *testing.T, env []string, faults string, p *harness.BareProc) {
	t.Helper()
	fault := filepath.Join(faults, "checkpoint."+strconv.Itoa(p.PID))
	if err := os.WriteFile(fault, []byte("hang\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		out, _ := harness.RunErr(time.Minute, env, harness.CryoBin(t, "cryo"), "cuda", "suspend", "--copy-timeout", "30s", strconv.Itoa(p.PID))
		done <- out
	}()
	defer func() {
		os.Remove(fault)
		<-done // the suspend's deadline rolls it back
	}()
	var got status.Process
	var r *status.Report
	// The window is the suspend's --copy-timeout: wide enough that a
	// loaded CI host, where the suspend takes seconds to reach the driver
	// and each `cryo ps` takes seconds more, still sees it.
	harness.WaitFor(t, 25*time.Second, "cryo ps to see the suspend under way", func() bool {
		var procs map[int]status.Process
		r, procs = psJSON(t, env)
		got = procs[p.PID]
		return got.State == status.StateBusy && got.Operation == "cuda suspend"
	})
	if got.TracerPID <= 0 || got.OperationPID <= 0 || !strings.Contains(got.Detail, "(cryo)") {
		t.Fatalf("busy process %+v: want its tracer, a cryo helper, and the suspend's pid", got)
	}
	if len(r.Locks) != 1 || r.Locks[0].Key != "pid-"+strconv.Itoa(p.PID) || r.Locks[0].HolderPID != got.OperationPID || r.Locks[0].Checkpoint {
		t.Fatalf("locks %+v: want the suspend's lock of pid %d", r.Locks, p.PID)
	}
	row := psRow(t, env, p.PID)
	wantRow(t, row, `busy \(traced by pid \d+\).*cuda suspend \(cryo pid `+strconv.Itoa(got.OperationPID)+`\)`)
	out := harness.Run(t, 20*time.Second, env, harness.CryoBin(t, "cryo"), "ps")
	harness.WantIn(t, out, "LOCK HOLDER", "cuda suspend", "pid-"+strconv.Itoa(p.PID)+".lock")
}

// psNoAnswer: a driver that does not answer a state query makes that
// process "unknown (driver did not answer)" after --timeout, not a failure.
func psNoAnswer(t *testing.T, env []string, faults string, p *harness.BareProc) {
	t.Helper()
	fault := filepath.Join(faults, "state."+strconv.Itoa(p.PID))
	if err := os.WriteFile(fault, []byte("hang\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(fault)
	start := time.Now()
	_, procs := psJSON(t, env, "--timeout", "1s")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cryo ps --timeout 1s took %s", d)
	}
	if got := procs[p.PID]; got.State != status.StateUnknown || got.Detail != "driver did not answer" {
		t.Fatalf("pid %d with a hung driver: %+v, want unknown", p.PID, got)
	}
	wantRow(t, psRow(t, env, p.PID), `unknown \(driver did not answer\)`)
}

// A container paused GPU-free by cryo-runc: its process is frozen (the
// driver is not asked), suspended by the pause, with the memory it held
// before and its container id from the pause record.
func TestPsPausedContainer(t *testing.T) {
	harness.RequireRoot(t)
	lockDir := filepath.Join(t.TempDir(), "locks")
	r := harness.RwStart(t, "cryo-ps", "CRYO_LOCK_DIR="+lockDir)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_LOCK_DIR="+lockDir)
	pid := harness.RwInitPID(t, r.Root, r.ID)
	harness.Run(t, time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "pause", r.ID)
	t.Cleanup(func() {
		harness.RunErr(time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "resume", r.ID)
	})

	rep, procs := psJSON(t, env)
	p := procs[pid]
	if p.State != status.StateFrozen || !p.Frozen || !p.Paused || p.Container != r.ID || p.GPUMemory != 1<<20 {
		t.Fatalf("paused container's pid %d: %+v; want frozen, paused, container %s, 1 MiB", pid, p, r.ID)
	}
	if len(rep.Pauses) != 1 || rep.Pauses[0].Container != r.ID || len(rep.Pauses[0].Processes) != 1 || !rep.Pauses[0].Processes[0].Alive {
		t.Fatalf("pauses %+v: want the pause of %s", rep.Pauses, r.ID)
	}
	wantRow(t, psRow(t, env, pid), `^\d+\s+`+regexp.QuoteMeta(r.ID)+`\s+frozen.*1\.0 MiB\s+paused \(GPU-free\)$`)

	// After the resume it runs again, and the record is gone.
	harness.Run(t, time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "resume", r.ID)
	rep, procs = psJSON(t, env)
	if p := procs[pid]; p.State != "running" || p.Paused || len(rep.Pauses) != 0 {
		t.Fatalf("after the resume: %+v, pauses %+v; want running, no pause", p, rep.Pauses)
	}
}

// A CUDA process in a cgroup frozen by someone else: `cryo ps` reports it
// frozen at once instead of hanging in the driver.
func TestPsFrozenCgroup(t *testing.T) {
	harness.RequireRoot(t)
	env, _ := psEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	fz := harness.NewFreezer(t, "cryo-ps-test-"+strconv.Itoa(os.Getpid()), p.PID)
	fz.Set(t, true)
	_, procs := psJSON(t, env)
	if got := procs[p.PID]; got.State != status.StateFrozen || !got.Frozen || got.Stopped {
		t.Fatalf("pid %d in a frozen cgroup: %+v, want frozen", p.PID, got)
	}
	wantRow(t, psRow(t, env, p.PID), `\sfrozen\s`)
	fz.Set(t, false)
	if _, procs := psJSON(t, env); procs[p.PID].State != "running" {
		t.Fatalf("pid %d after the thaw: %+v, want running", p.PID, procs[p.PID])
	}
}
