package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// a100 is a GPU the checkpoints of these tests (taken on the fake driver's
// default H100) cannot be restored on.
const a100 = "NVIDIA A100-SXM4-80GB|GPU-a100a100-0000-4000-8000-000000000001|85899345920|8.0"

// TestContainerdBadInput runs the shim's answers to bad input under
// containerd 2.x and 1.7: a checkpoint that needs a GPU this host lacks,
// and a shim killed in the middle of a checkpoint.
func TestContainerdBadInput(t *testing.T) {
	requireRoot(t)
	for _, v := range []ctrdVersion{ctrdVersions[1], ctrdVersions[0]} {
		t.Run(v.name, func(t *testing.T) {
			start := time.Now()
			// The fake NVML reads this file at every nvmlInit, in cryo's
			// helper: the test switches the host's GPUs at run time.
			gpus := filepath.Join(t.TempDir(), "gpus")
			t.Setenv("CRYO_FAKE_GPUS_FILE", gpus)
			d := startDaemon(t, v)
			d.importTestImage()
			for _, c := range []struct {
				name string
				run  func(d *daemon, gpus string)
			}{
				{"RestoreNeedsMissingGPU", testRestoreNeedsMissingGPU},
				{"ShimKilledWhileCUDALocked", testShimKilledWhileLocked},
				{"ShimKilledWhileCUDACheckpointed", testShimKilledWhileCheckpointed},
				{"ShimKilledWhileFrozen", testShimKilledWhileFrozen},
			} {
				t.Run(c.name, func(t *testing.T) {
					began := time.Now()
					c.run(d.with(t), gpus)
					t.Logf("%s/%s took %s", v.name, c.name, time.Since(began).Round(time.Millisecond))
				})
			}
			t.Logf("%s took %s", v.name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// testRestoreNeedsMissingGPU: a checkpoint taken on an H100, restored on a
// host that offers only an A100, fails at Create, through the Go client and
// through `ctr container restore`, with a message that names what the
// restore needs and what the host offers. Nothing is restored and the
// original container is not touched; on the H100 again the same
// checkpoints restore.
func testRestoreNeedsMissingGPU(d *daemon, gpus string) {
	d.runApp("mg")
	pid := d.taskPid("mg")
	ref, before := d.taskCheckpoint("mg")
	cref := "localhost/cryo/checkpoint:mg"
	d.containerCheckpoint("mg", cref)

	if err := os.WriteFile(gpus, []byte(a100+"\n"), 0o644); err != nil {
		d.t.Fatal(err)
	}
	defer os.Remove(gpus)

	// Go client: the task's Create fails.
	ctx := namespacedCtx()
	ckpt, err := d.client.GetImage(ctx, ref)
	if err != nil {
		d.t.Fatal(err)
	}
	c := d.newContainer("mg-go")
	_, err = c.NewTask(ctx, cio.LogFile(d.logPath("mg-go")), client.WithTaskCheckpoint(ckpt))
	if err == nil {
		d.t.Fatalf("restore of an H100 checkpoint on an A100 host succeeded\n%s", lastLines(d.log(), 30))
	}
	assertGPURefusal(d.t, "Go client", err.Error())
	if !errdefs.IsFailedPrecondition(err) {
		d.t.Errorf("Go client: error class %v, want failed precondition", err)
	}
	d.assertNoTask("mg-go")
	d.assertNoRestore("mg-go")

	// ctr container restore: the same refusal reaches ctr.
	out, err := d.ctrErr("container", "restore", "--live", "--rw", "mg-ctr", cref)
	if err == nil {
		d.t.Fatalf("ctr container restore on an A100 host succeeded:\n%s", out)
	}
	assertGPURefusal(d.t, "ctr container restore", out)
	d.assertNoTask("mg-ctr")
	d.assertNoRestore("mg-ctr")

	// The original was not touched: same process, running and ticking.
	if got := d.taskPid("mg"); got != pid {
		d.t.Fatalf("original's pid changed from %d to %d", pid, got)
	}
	d.assertRunsOn("mg")
	if p, err := fakecuda.ReadPage(pid); err != nil || p.State != 0 {
		d.t.Fatalf("original's CUDA state %+v (%v), want running", p, err)
	}

	// The refusal was the host's: with the H100 back, the checkpoint restores.
	if err := os.Remove(gpus); err != nil {
		d.t.Fatal(err)
	}
	task, err := c.NewTask(ctx, cio.LogFile(d.logPath("mg-go")), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		d.t.Fatalf("restore on the H100 host: %v\n%s", err, lastLines(d.log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.t.Fatalf("start restored mg-go: %v\n%s", err, lastLines(d.log(), 30))
	}
	d.waitTicks("mg-go", 3)
	assertContinues(d.t, d.logPath("mg-go"), before)
	d.remove("mg-go")
	d.remove("mg-ctr")
	d.remove("mg")
}

// assertGPURefusal checks the text of a refused restore: the step, what
// the checkpoint needs (the H100, sm_90) and what this host offers (the
// A100, sm_80).
func assertGPURefusal(t testing.TB, who, msg string) {
	t.Helper()
	for _, want := range []string{"restore needs 1× NVIDIA H100 80GB HBM3 (sm_90)", "this host offers 1× NVIDIA A100-SXM4-80GB (sm_80)", "nothing was restored"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("%s: refusal %q does not say %q", who, msg, want)
		}
	}
	t.Logf("%s: %s", who, strings.TrimSpace(msg))
}

// assertNoTask checks that container id, if it exists, has no task.
func (d *daemon) assertNoTask(id string) {
	d.t.Helper()
	ctx := namespacedCtx()
	c, err := d.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return
	}
	if err != nil {
		d.t.Fatal(err)
	}
	if task, err := c.Task(ctx, nil); err == nil {
		st, _ := task.Status(ctx)
		d.t.Fatalf("%s has a task (pid %d, %s) after a refused restore", id, task.Pid(), st.Status)
	} else if !errdefs.IsNotFound(err) {
		d.t.Fatalf("%s: task: %v", id, err)
	}
}

// assertNoRestore checks the daemon's log: the shim refused the restore
// of id and never got as far as runc restore.
func (d *daemon) assertNoRestore(id string) {
	d.t.Helper()
	refused := false
	for _, line := range strings.Split(d.log(), "\n") {
		if !strings.Contains(line, id) {
			continue
		}
		if strings.Contains(line, "cryo: restore refused") {
			refused = true
		}
		if strings.Contains(line, "step=restore") || strings.Contains(line, "cryo: restore done") {
			d.t.Fatalf("%s: the restore went on after the refusal: %s", id, line)
		}
	}
	if !refused {
		d.t.Fatalf("%s: no \"cryo: restore refused\" in the daemon's log\n%s", id, lastLines(d.log(), 30))
	}
}

// testShimKilledWhileLocked: the shim is SIGKILLed while the CUDA
// checkpoint of the task is in flight (the fake driver delays it), so the
// application is CUDA-locked when the shim dies.
func testShimKilledWhileLocked(d *daemon, _ string) {
	d.runApp("skl")
	pid := d.taskPid("skl")
	fault := filepath.Join(d.faults, fmt.Sprintf("checkpoint.%d", pid))
	if err := os.WriteFile(fault, []byte("delay 10000\n"), 0o644); err != nil {
		d.t.Fatal(err)
	}
	defer os.Remove(fault)
	d.killShimDuringCheckpoint("skl", pid, func() bool {
		p, err := fakecuda.ReadPage(pid)
		return err == nil && p.State == 1
	})
}

// testShimKilledWhileCheckpointed: the shim is SIGKILLed during the dump
// (a runc wrapper, the runc option BinaryName, stalls `runc checkpoint`),
// so the application's CUDA state is checkpointed when the shim dies.
func testShimKilledWhileCheckpointed(d *daemon, _ string) {
	c := d.newContainer("skc", &options.Options{BinaryName: d.stallingRunc("checkpoint")})
	d.startApp(c)
	pid := d.taskPid("skc")
	d.killShimDuringCheckpoint("skc", pid, func() bool {
		p, err := fakecuda.ReadPage(pid)
		return err == nil && p.State == 2
	})
}

// testShimKilledWhileFrozen: the shim is SIGKILLed before it could thaw
// the task that containerd paused for the checkpoint (the runc wrapper
// stalls `runc resume`), so the task's cgroup is frozen when the shim dies.
func testShimKilledWhileFrozen(d *daemon, _ string) {
	wrapper := d.stallingRunc("resume")
	c := d.newContainer("skf", &options.Options{BinaryName: wrapper})
	d.startApp(c)
	pid := d.taskPid("skf")
	d.killShimDuringCheckpoint("skf", pid, func() bool {
		_, err := os.Stat(wrapper + ".stalled")
		return err == nil && procfs.Frozen(pid)
	})
}

// stallingRunc writes a runc wrapper that, for the runc command cmd,
// creates <wrapper>.stalled, sleeps 20 s and fails; other commands go to
// runc.
func (d *daemon) stallingRunc(cmd string) string {
	d.t.Helper()
	wrapper := filepath.Join(d.dir, "runc-stalling-"+cmd)
	script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = %s ] && { touch \"$0.stalled\"; sleep 20; exit 1; }; done\nexec runc \"$@\"\n", cmd)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		d.t.Fatal(err)
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
func (d *daemon) killShimDuringCheckpoint(id string, pid int, ready func() bool) {
	d.t.Helper()
	type result struct {
		out string
		err error
	}
	images := d.imageCount()
	done := make(chan result, 1)
	go func() {
		out, err := d.ctrErr("task", "checkpoint", id)
		done <- result{out, err}
	}()
	waitFor(d.t, 20*time.Second, "the checkpoint of "+id+" to get under way", ready)
	shim := d.shimPid(id)
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		d.t.Fatalf("kill shim %d: %v", shim, err)
	}
	killed := time.Now()
	p, _ := fakecuda.ReadPage(pid)
	d.t.Logf("killed shim %d; pid %d: CUDA state %d, cgroup frozen: %v", shim, pid, p.State, procfs.Frozen(pid))
	select {
	case r := <-done:
		if r.err == nil {
			d.t.Fatalf("ctr task checkpoint succeeded although its shim was killed:\n%s", r.out)
		}
		d.t.Logf("ctr task checkpoint: %v: %s", r.err, strings.TrimSpace(r.out))
		if n := d.imageCount(); n != images {
			d.t.Fatalf("%d images after the failed checkpoint, %d before", n, images)
		}
	case <-time.After(60 * time.Second):
		d.t.Fatal("ctr task checkpoint still runs 60 s after its shim was killed")
	}

	// Defined outcome: either the task runs on, or it is stopped and the
	// container starts again. Never a live process left CUDA-suspended.
	outcome := d.settle(id, pid)
	d.t.Logf("outcome after the shim's death: %s, settled in %s", outcome, time.Since(killed).Round(time.Millisecond))
	switch outcome {
	case "running":
		if p, err := fakecuda.ReadPage(pid); err != nil || p.State != 0 {
			d.t.Fatalf("task runs, but its CUDA state is %+v (%v), want running", p, err)
		}
		d.assertRunsOn(id)
	case "stopped":
		d.restartTask(id)
	}
	d.remove(id)
}

// settle waits for containerd to deal with the dead shim. "stopped": the
// task is gone or stopped, containerd's cleanup is over (the bundle is
// removed) and the task's process is dead. "running": the task answers as
// running and its CUDA state is running.
func (d *daemon) settle(id string, pid int) string {
	d.t.Helper()
	ctx := namespacedCtx()
	c, err := d.client.LoadContainer(ctx, id)
	if err != nil {
		d.t.Fatalf("container %s after its shim died: %v", id, err)
	}
	bundle := filepath.Join(d.dir, "state", "io.containerd.runtime.v2.task", testNamespace, id)
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
	d.t.Fatalf("%s is wedged 30 s after its shim died: %s; CUDA state %+v (%v)\n%s", id, last, p, perr, lastLines(d.log(), 40))
	return ""
}

// restartTask starts a new task of an existing container with `ctr task
// start` and checks that it ticks from the start. containerd forgets a
// dead shim's task in two steps: its task service stops listing it before
// its runtime drops it, and a start in between answers "already exists"
// (seen on containerd 2.1 under load). A user retries; so does the test,
// for as long as that lag may last.
func (d *daemon) restartTask(id string) {
	d.t.Helper()
	_ = os.Rename(d.logPath(id), d.logPath(id)+".before")
	args := []string{"task", "start", "-d", "--log-uri", "file://" + d.logPath(id), id}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := d.ctrErr(args...)
		if err == nil {
			break
		}
		if !strings.Contains(out, "already exists") || time.Now().After(deadline) {
			d.t.Fatalf("ctr %s: %v\n%s\n--- containerd log (tail) ---\n%s", strings.Join(args, " "), err, out, lastLines(d.log(), 40))
		}
	}
	d.waitTicks(id, 3)
	if ts := ctrdTicks(d.t, d.logPath(id)); ts[0] > 2 {
		d.t.Fatalf("new task of %s starts at tick %d, want a fresh start", id, ts[0])
	}
	if st := d.taskStatus(id); st != client.Running {
		d.t.Fatalf("new task of %s: %s, want running", id, st)
	}
}

// imageCount is the number of images in the daemon's test namespace.
func (d *daemon) imageCount() int {
	d.t.Helper()
	imgs, err := d.client.ListImages(namespacedCtx())
	if err != nil {
		d.t.Fatal(err)
	}
	return len(imgs)
}

// taskPid is the pid of a container's task.
func (d *daemon) taskPid(id string) int {
	d.t.Helper()
	return int(d.task(id).Pid())
}

// shimPid finds the serving shim of task id: containerd-shim-cryo-v2 with
// -id id and no action, working in a directory of this daemon.
func (d *daemon) shimPid(id string) int {
	d.t.Helper()
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
		if cwd, err := os.Readlink(filepath.Join(dir, "cwd")); err != nil || !strings.HasPrefix(cwd, d.dir) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
			return pid
		}
	}
	d.t.Fatalf("no shim process for %s", id)
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
