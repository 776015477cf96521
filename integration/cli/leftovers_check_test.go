package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// withoutMarker is this process's environment without CRYO_TEST_RUN,
// whose value, under `make test`, is the outer run's.
func withoutMarker() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CRYO_TEST_RUN=") {
			env = append(env, e)
		}
	}
	return env
}

// startSleep starts a `sleep` (through sh when script is set) with env and
// stops it, and its process group, at the end of the test.
func startSleep(t *testing.T, env []string, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if script != "" {
		cmd = exec.Command("sh", "-c", script)
	}
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd
}

// leftoversAfter runs `contrib/leftovers.sh after` for the marker and
// returns its output and exit status.
func leftoversAfter(t *testing.T, before, marker string) (string, int) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(harness.RepoRoot(), "contrib", "leftovers.sh"), "after", before, marker)
	cmd.Env = append(withoutMarker(), "CRYO_LEFTOVERS_WAIT=2")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), 0
}

// TestLeftoversCheck: `make test`'s leftover check reports a process the
// run started (one that carries the run's marker, and one whose parent
// does, as a container's process under its shim) and not the processes of
// other shells, whether started before the run or during it.
func TestLeftoversCheck(t *testing.T) {
	marker := fmt.Sprintf("check-%d-%d", os.Getpid(), time.Now().UnixNano())
	other := withoutMarker()
	old := startSleep(t, other, "")
	before := filepath.Join(t.TempDir(), "procs.before")
	if out, err := exec.Command("bash", filepath.Join(harness.RepoRoot(), "contrib", "leftovers.sh"), "before", before).CombinedOutput(); err != nil {
		t.Fatalf("leftovers.sh before: %v\n%s", err, out)
	}
	unrelated := startSleep(t, other, "")
	if out, code := leftoversAfter(t, before, marker); code != 0 {
		t.Fatalf("unrelated sleeps (%d before, %d during the run) counted as leftovers (exit %d):\n%s", old.Process.Pid, unrelated.Process.Pid, code, out)
	}

	marked := append(append([]string{}, other...), "CRYO_TEST_RUN="+marker)
	own := startSleep(t, marked, "")
	// The child drops the marker, as runc gives a container its spec's
	// environment: its parent still carries it.
	parent := startSleep(t, marked, "env -u CRYO_TEST_RUN sleep 300; :")
	var child int
	harness.WaitFor(t, 10*time.Second, "the unmarked child to start", func() bool {
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(parent.Process.Pid), "sleep").Output()
		child, _ = strconv.Atoi(strings.TrimSpace(string(out)))
		return child > 0
	})
	out, code := leftoversAfter(t, before, marker)
	t.Logf("exit %d:\n%s", code, out)
	if code != 1 || !strings.Contains(out, "the tests left processes behind") {
		t.Fatalf("leftovers not reported (exit %d):\n%s", code, out)
	}
	pids := map[int]bool{}
	for _, l := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(l); len(f) > 0 {
			p, _ := strconv.Atoi(f[0])
			pids[p] = true
		}
	}
	for name, p := range map[string]int{"the marked sleep": own.Process.Pid, "the marked shell": parent.Process.Pid, "its unmarked child": child} {
		if !pids[p] {
			t.Errorf("%s (pid %d) is not reported", name, p)
		}
	}
	for name, p := range map[string]int{"the sleep from before": old.Process.Pid, "the unrelated sleep": unrelated.Process.Pid} {
		if pids[p] {
			t.Errorf("%s (pid %d) is reported", name, p)
		}
	}
}
