package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holdLock takes cryo's lock of key in lockDir as a run of op on target
// does (the file, the flock, the holder's line), until the test ends.
func holdLock(t *testing.T, lockDir, key, op, target string) func() {
	t.Helper()
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(lockDir, key+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "%d %s of %s\n", os.Getpid(), op, target)
	release := func() { f.Close() }
	t.Cleanup(release)
	return release
}

type cudaStateJSON struct {
	PID          int    `json:"pid"`
	State        string `json:"state"`
	Frozen       bool   `json:"frozen"`
	Operation    string `json:"operation"`
	OperationPID int    `json:"operation_pid"`
	Error        string `json:"error"`
}

// cudaStateOf runs `cryo cuda state --json PID`, which must answer at once.
func cudaStateOf(t *testing.T, env []string, pid int) (cudaStateJSON, string) {
	t.Helper()
	start := time.Now()
	stdout, stderr, code := cryoSplit(t, env, "cuda", "state", "--json", strconv.Itoa(pid))
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cuda state took %s", d)
	}
	var st []cudaStateJSON
	wantJSON(t, "cuda state --json", stdout, &st)
	if code != 0 || len(st) != 1 {
		t.Fatalf("cuda state: exit %d, %+v\n%s", code, st, stderr)
	}
	return st[0], stderr
}

// A CUDA process in a frozen cgroup (a paused container) is "frozen" at
// once, without the driver's 30 s hang; while a checkpoint holds its lock
// the message says so instead of suggesting `cryo cuda resume`.
func TestCLICudaStateFrozen(t *testing.T) {
	requireRoot(t)
	env, lockDir := psEnv(t, "")
	p := bareStartFakeApp(t, env, nil)
	fz := newFreezer(t, "cryo-state-test-"+strconv.Itoa(os.Getpid()), p.pid)
	fz.set(t, true)

	release := holdLock(t, lockDir, "pid-"+strconv.Itoa(p.pid), "checkpoint", "pid "+strconv.Itoa(p.pid))
	st, stderr := cudaStateOf(t, env, p.pid)
	if st.State != "frozen" || !st.Frozen || st.Operation != "checkpoint" || st.OperationPID != os.Getpid() {
		t.Fatalf("frozen, locked by a checkpoint: %+v", st)
	}
	wantIn(t, stderr, "checkpoint of it is in progress", "cryo pid "+strconv.Itoa(os.Getpid()))
	if strings.Contains(stderr, "cuda resume") {
		t.Fatalf("suggests cuda resume under a checkpoint:\n%s", stderr)
	}

	release()
	st, stderr = cudaStateOf(t, env, p.pid)
	if st.State != "frozen" || st.Operation != "" {
		t.Fatalf("frozen, no lock: %+v", st)
	}
	wantIn(t, stderr, "is frozen", "remedy: resume the container")
	text, _, code := cryoSplit(t, env, "cuda", "state", strconv.Itoa(p.pid))
	if code != 0 || strings.TrimSpace(text) != strconv.Itoa(p.pid)+"\tfrozen" {
		t.Fatalf("cuda state text: exit %d %q", code, text)
	}

	fz.set(t, false)
	if st, _ = cudaStateOf(t, env, p.pid); st.State != "running" || st.Frozen {
		t.Fatalf("after the thaw: %+v", st)
	}
}

