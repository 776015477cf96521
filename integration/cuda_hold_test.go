package integration

// `cryo cuda suspend` keeps the process's threads stopped while its GPU
// state is away. The fake app's touch thread (CRYO_FAKE_TOUCH=1) reads a
// page the driver maps, outside any CUDA call, as libcuda's own threads
// do; run while the process is checkpointed it faults and the process
// dies, as a JAX process died on a real GPU. Through suspend, state and
// resume the process lives, is reported stopped, and carries on.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/cudacr/proc"
)

func TestCUDASuspendHoldsThreads(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	logPath := filepath.Join(t.TempDir(), "app.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(fakeFile(t, "fakecuda-app"), "20")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Dir(fakeFile(t, "libcuda.so.1")), "CRYO_FAKE_TOUCH=1")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-done })
	pid := strconv.Itoa(cmd.Process.Pid)
	ticks := func() int { return ctrdLastTick(t, logPath) }
	waitFor(t, 10*time.Second, "first ticks", func() bool { return ticks() >= 3 })

	run(t, time.Minute, env, cryoBin(t, "cryo"), "cuda", "suspend", pid)
	time.Sleep(300 * time.Millisecond) // 300 touches, were a thread running
	if !proc.Alive(cmd.Process.Pid) {
		t.Fatalf("the process died while suspended:\n%s", readFile(logPath))
	}
	if st := run(t, time.Minute, env, cryoBin(t, "cryo"), "cuda", "state", pid); !strings.Contains(st, "checkpointed (stopped)") {
		t.Fatalf("cuda state of a suspended process: %q, want checkpointed (stopped)", st)
	}
	held := ticks()
	run(t, time.Minute, env, cryoBin(t, "cryo"), "cuda", "resume", pid)
	waitFor(t, 10*time.Second, "ticks after resume", func() bool { return ticks() >= held+3 })
	if st := run(t, time.Minute, env, cryoBin(t, "cryo"), "cuda", "state", pid); !strings.Contains(st, "running") || strings.Contains(st, "stopped") {
		t.Fatalf("cuda state after resume: %q", st)
	}
}
