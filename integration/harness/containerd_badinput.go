package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// A100 is a GPU the checkpoints of these tests (taken on the fake driver's
// default H100) cannot be restored on.
const A100 = "NVIDIA A100-SXM4-80GB|GPU-a100a100-0000-4000-8000-000000000001|85899345920|8.0"

// AssertGPURefusal checks the text of a refused restore: the step, what
// the checkpoint needs (the H100, sm_90) and what this host offers (the
// A100, sm_80).
func AssertGPURefusal(t testing.TB, who, msg string) {
	t.Helper()
	for _, want := range []string{"restore needs 1× NVIDIA H100 80GB HBM3 (sm_90)", "this host offers 1× NVIDIA A100-SXM4-80GB (sm_80)", "nothing was restored"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("%s: refusal %q does not say %q", who, msg, want)
		}
	}
	t.Logf("%s: %s", who, strings.TrimSpace(msg))
}

// assertNoTask checks that container id, if it exists, has no task.
func (d *Daemon) AssertNoTask(id string) {
	d.T.Helper()
	ctx := NamespacedCtx()
	c, err := d.Client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return
	}
	if err != nil {
		d.T.Fatal(err)
	}
	if task, err := c.Task(ctx, nil); err == nil {
		st, _ := task.Status(ctx)
		d.T.Fatalf("%s has a task (pid %d, %s) after a refused restore", id, task.Pid(), st.Status)
	} else if !errdefs.IsNotFound(err) {
		d.T.Fatalf("%s: task: %v", id, err)
	}
}

// assertNoRestore checks the daemon's log: the shim refused the restore
// of id and never got as far as runc restore.
func (d *Daemon) AssertNoRestore(id string) {
	d.T.Helper()
	refused := false
	for _, line := range strings.Split(d.Log(), "\n") {
		if !strings.Contains(line, id) {
			continue
		}
		if strings.Contains(line, "cryo: restore refused") {
			refused = true
		}
		if strings.Contains(line, "step=restore") || strings.Contains(line, "cryo: restore done") {
			d.T.Fatalf("%s: the restore went on after the refusal: %s", id, line)
		}
	}
	if !refused {
		d.T.Fatalf("%s: no \"cryo: restore refused\" in the daemon's log\n%s", id, LastLines(d.Log(), 30))
	}
}

// stallingRunc writes a runc wrapper that, for the runc command cmd,
// creates <wrapper>.stalled, sleeps 20 s and fails; other commands go to
// runc.
func (d *Daemon) StallingRunc(cmd string) string {
	d.T.Helper()
	wrapper := filepath.Join(d.Dir, "runc-stalling-"+cmd)
	script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = %s ] && { touch \"$0.stalled\"; sleep 20; exit 1; }; done\nexec runc \"$@\"\n", cmd)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		d.T.Fatal(err)
	}
	return wrapper
}

// killShimDuringCheckpoint runs `ctr task checkpoint id` and SIGKILLs the
// task's shim once ready says the checkpoint got to the point under test.
// containerd notices the dead shim and its cleanup
// (`containerd-shim-cryo-v2 delete`: runc delete --force) must leave the
// container defined: the task runs on with CUDA running, or it is stopped,
// no process of it stays behind suspended, and a new task of the same
// container runs.
func (d *Daemon) KillShimDuringCheckpoint(id string, pid int, ready func() bool) {
	d.T.Helper()
	type result struct {
		out string
		err error
	}
	images := d.imageCount()
	done := make(chan result, 1)
	go func() {
		out, err := d.CtrErr("task", "checkpoint", id)
		done <- result{out, err}
	}()
	WaitFor(d.T, 20*time.Second, "the checkpoint of "+id+" to get under way", ready)
	shim := d.ShimPid(id)
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		d.T.Fatalf("kill shim %d: %v", shim, err)
	}
	killed := time.Now()
	p, _ := fakecuda.ReadPage(pid)
	d.T.Logf("killed shim %d; pid %d: CUDA state %d, cgroup frozen: %v", shim, pid, p.State, procfs.Frozen(pid))
	select {
	case r := <-done:
		if r.err == nil {
			d.T.Fatalf("ctr task checkpoint succeeded although its shim was killed:\n%s", r.out)
		}
		d.T.Logf("ctr task checkpoint: %v: %s", r.err, strings.TrimSpace(r.out))
		if n := d.imageCount(); n != images {
			d.T.Fatalf("%d images after the failed checkpoint, %d before", n, images)
		}
	case <-time.After(60 * time.Second):
		d.T.Fatal("ctr task checkpoint still runs 60 s after its shim was killed")
	}

	// Defined outcome: either the task runs on, or it is stopped and the
	// container starts again. Never a live process left CUDA-suspended.
	outcome := d.settle(id, pid)
	d.T.Logf("outcome after the shim's death: %s, settled in %s", outcome, time.Since(killed).Round(time.Millisecond))
	switch outcome {
	case "running":
		if p, err := fakecuda.ReadPage(pid); err != nil || p.State != 0 {
			d.T.Fatalf("task runs, but its CUDA state is %+v (%v), want running", p, err)
		}
		d.AssertRunsOn(id)
	case "stopped":
		d.restartTask(id)
	}
	d.Remove(id)
}

// settle waits for containerd to deal with the dead shim. "stopped": the
// task is gone or stopped, containerd's cleanup is over (the bundle is
// removed) and the task's process is dead. "running": the task answers as
// running and its CUDA state is running.
func (d *Daemon) settle(id string, pid int) string {
	d.T.Helper()
	ctx := NamespacedCtx()
	c, err := d.Client.LoadContainer(ctx, id)
	if err != nil {
		d.T.Fatalf("container %s after its shim died: %v", id, err)
	}
	bundle := filepath.Join(d.Dir, "state", "io.containerd.runtime.v2.task", TestNamespace, id)
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		task, err := c.Task(ctx, nil)
		if err == nil {
			st, serr := task.Status(ctx)
			err = serr
			if serr == nil && st.Status == client.Stopped {
				// containerd 1.7 may be deleting it too (its dead-shim
				// cleanup): gone only once containerd no longer has it,
				// else a new task of the container "already exists".
				_, _ = task.Delete(ctx)
				_, err = c.Task(ctx, nil)
			}
			if serr == nil && st.Status == client.Running {
				p, perr := fakecuda.ReadPage(pid)
				if perr == nil && p.State == 0 {
					return "running"
				}
				last = fmt.Sprintf("task running, CUDA state %+v (%v)", p, perr)
			}
		}
		if errdefs.IsNotFound(err) {
			_, berr := os.Stat(bundle)
			last = fmt.Sprintf("no task; bundle left: %v; pid %d alive: %v", berr == nil, pid, procfs.Alive(pid))
			if os.IsNotExist(berr) && !procfs.Alive(pid) {
				return "stopped"
			}
		} else if err != nil {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	p, perr := fakecuda.ReadPage(pid)
	d.T.Fatalf("%s is wedged 30 s after its shim died: %s; CUDA state %+v (%v)\n%s", id, last, p, perr, LastLines(d.Log(), 40))
	return ""
}

// restartTask starts a new task of an existing container with `ctr task
// start` and checks that it ticks from the start. containerd forgets a
// dead shim's task in two steps: its task service stops listing it before
// its runtime drops it, and a start in between answers "already exists"
// (seen on containerd 2.1 under load). A user retries; so does the test,
// for as long as that lag may last.
func (d *Daemon) restartTask(id string) {
	d.T.Helper()
	_ = os.Rename(d.LogPath(id), d.LogPath(id)+".before")
	args := []string{"task", "start", "-d", "--log-uri", "file://" + d.LogPath(id), id}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := d.CtrErr(args...)
		if err == nil {
			break
		}
		if !strings.Contains(out, "already exists") || time.Now().After(deadline) {
			d.T.Fatalf("ctr %s: %v\n%s\n--- containerd log (tail) ---\n%s", strings.Join(args, " "), err, out, LastLines(d.Log(), 40))
		}
	}
	d.WaitTicks(id, 3)
	if ts := CtrdTicks(d.T, d.LogPath(id)); ts[0] > 2 {
		d.T.Fatalf("new task of %s starts at tick %d, want a fresh start", id, ts[0])
	}
	if st := d.TaskStatus(id); st != client.Running {
		d.T.Fatalf("new task of %s: %s, want running", id, st)
	}
}

// imageCount is the number of images in the daemon's test namespace.
func (d *Daemon) imageCount() int {
	d.T.Helper()
	imgs, err := d.Client.ListImages(NamespacedCtx())
	if err != nil {
		d.T.Fatal(err)
	}
	return len(imgs)
}

// taskPid is the pid of a container's task.
func (d *Daemon) TaskPid(id string) int {
	d.T.Helper()
	return int(d.Task(id).Pid())
}

// shimPid finds the serving shim of task id: containerd-shim-cryo-v2 with
// -id id and no action, working in a directory of this daemon.
func (d *Daemon) ShimPid(id string) int {
	d.T.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "containerd-shim-cryo-v2" || !hasArgPair(args, "-id", id) {
			continue
		}
		if last := args[len(args)-1]; last == "start" || last == "delete" {
			continue
		}
		dir := filepath.Dir(p)
		if cwd, err := os.Readlink(filepath.Join(dir, "cwd")); err != nil || !strings.HasPrefix(cwd, d.Dir) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
			return pid
		}
	}
	d.T.Fatalf("no shim process for %s", id)
	return 0
}

func hasArgPair(args []string, flag, value string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && args[i+1] == value {
			return true
		}
	}
	return false
}
