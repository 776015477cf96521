package containerd

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"golang.org/x/sys/unix"
)

// TestShimRestoreSignalSweep: every step of a container's restore (read
// from the restore's tables) × SIGINT to ctr's group, then SIGKILL of the
// shim before CRIU's restore and before the CUDA resume (after CRIU, the
// restored tree held), and containerd's SIGTERM then SIGKILL to the
// shim's group at the latter. The steps of the table are few: all are
// swept. A Ctrl-C during the checks (Create) ends with no task; one during
// Start with the restored task running, CUDA resumed: ctr's FIFOs, which
// the task's stdio opens in Start, have lost their reader by then, and
// that open must not wait for one. About 10 s.
func TestShimRestoreSignalSweep(t *testing.T) {
	setting := filepath.Join(t.TempDir(), "hold-setting")
	// containerd unpacks the checkpoint it passes to the shim into a
	// directory of its TMPDIR, which the shim removes: one of this
	// daemon's own, checked after each case.
	tmp := t.TempDir()
	d := harness.NewDaemon(t, harness.CtrdVersions[1], false)
	d.EnvExtra = []string{"PATH=" + filepath.Dir(harness.FailpointBin(t, "containerd-shim-cryo-v2")) + ":" + harness.BinDir() + ":" + d.Bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CRYO_TEST_HOLD=@" + setting, "TMPDIR=" + tmp}
	d.Start()
	d.ImportTestImage()
	src := harness.UniqueID("src")
	d.RunApp(src)
	ref := "localhost/ckpt/" + src + ":1"
	d.ContainerCheckpoint(src, ref)
	d.Remove(src)
	steps := orchestrate.RestoreSteps(true)
	// The shim's create of the checked restore's task, the last of
	// Create, after the steps of the checks.
	at := slices.Index(steps, orchestrate.StepRestore)
	steps = slices.Insert(steps, at, orchestrate.StepCreateTask)
	for _, step := range steps {
		t.Run(string(step)+"/SIGINT-ctr", func(t *testing.T) {
			name := harness.UniqueID("rs")
			t.Cleanup(func() { d.Remove(name) })
			g, shim := heldCtrRestore(t, d, setting, string(step), name, ref)
			t.Cleanup(func() {
				if t.Failed() {
					// A shim that hangs in Start would hang the removal
					// of its task too.
					t.Logf("containerd's log:\n%s", harness.LastLines(d.Log(), 60))
					syscall.Kill(shim, syscall.SIGKILL)
				}
			})
			g.SignalGroup(syscall.SIGINT)
			code := g.Wait(t)
			t.Logf("ctr exited %d after SIGINT to its group:\n%s", code, g.Out)
			os.Remove(filepath.Join(filepath.Dir(setting), "hold"))
			if slices.Index(steps, step) < slices.Index(steps, orchestrate.StepRestore) {
				// The checks run in Create: ctr gone, containerd cancels
				// the create and shuts the shim down (Delete, Shutdown),
				// before anything was restored.
				harness.WaitFor(t, 20*time.Second, "containerd to shut the shim down", func() bool { return !procfs.Alive(shim) })
				if _, err := d.Client.LoadContainer(harness.NamespacedCtx(), name); err == nil && taskExists(d, name) {
					t.Errorf("a task of %s is left after its create was cancelled", name)
				}
				harness.WantNothingLeft(t, harness.TestNamespace, name, "", "the create cut at "+string(step))
				wantNoCopy(t, tmp, "the create cut at "+string(step))
				return
			}
			// Start: the shim, in a session of its own, lives on and
			// ends the restore it was asked for.
			if !procfs.Alive(shim) {
				t.Fatalf("the shim (pid %d) died with ctr", shim)
			}
			restoredRunsOn(t, d, name)
			wantNoCopy(t, tmp, "the restore signalled at "+string(step))
		})
	}
	for _, c := range []struct {
		step  orchestrate.StepName
		group bool // containerd's way: SIGTERM, then SIGKILL, to the shim's group
	}{{orchestrate.StepRestore, false}, {orchestrate.StepResume, false}, {orchestrate.StepResume, true}} {
		how := "SIGKILL-shim"
		if c.group {
			how = "SIGTERM-SIGKILL-shim-group"
		}
		step := c.step
		t.Run(string(step)+"/"+how, func(t *testing.T) {
			name := harness.UniqueID("rk")
			t.Cleanup(func() { d.Remove(name) })
			g, shim := heldCtrRestore(t, d, setting, string(step), name, ref)
			restored := harness.ChildrenNamed(shim, "fakecuda-app")
			if step == orchestrate.StepResume && len(restored) == 0 {
				t.Fatalf("no restored process under the shim (pid %d) before the CUDA resume", shim)
			}
			if c.group {
				if pg, _ := syscall.Getpgid(shim); pg != shim {
					t.Fatalf("the shim (pid %d) leads no group of its own (group %d)", shim, pg)
				}
				syscall.Kill(-shim, syscall.SIGTERM)
				time.Sleep(500 * time.Millisecond)
				syscall.Kill(-shim, syscall.SIGKILL)
			} else {
				syscall.Kill(shim, syscall.SIGKILL)
			}
			code := g.Wait(t)
			t.Logf("ctr exited %d after the shim was killed before %s:\n%s", code, step, g.Out)
			if code == 0 {
				t.Errorf("ctr container restore succeeded with its shim killed before %s", step)
			}
			harness.WaitFor(t, 20*time.Second, "containerd to see the task fail", func() bool { return !taskRuns(d, name) })
			for _, pid := range restored {
				harness.WaitFor(t, 10*time.Second, "restored pid "+strconv.Itoa(pid)+" to be gone", func() bool { return !procfs.Alive(pid) })
			}
			d.Remove(name)
			harness.WantNothingLeft(t, harness.TestNamespace, name, "", "the shim killed before "+string(step))
		})
	}
}

// heldCtrRestore starts `ctr container restore --live name ref` in a
// group of its own with the shim held before step, and returns it and the
// shim's pid, checked to be in a session that is not ctr's.
func heldCtrRestore(t *testing.T, d *harness.Daemon, setting, step, name, ref string) (*harness.GroupCryo, int) {
	t.Helper()
	hold := filepath.Join(filepath.Dir(setting), "hold")
	os.Remove(hold)
	if err := os.WriteFile(setting, []byte("restore/"+step+":"+hold), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(setting); os.Remove(hold) })
	g := harness.StartGroupCryo(t, filepath.Join(d.Bin, "ctr"), d.Env(), "--address", d.Socket, "--namespace", harness.TestNamespace, "container", "restore", "--live", name, ref)
	harness.WaitHold(t, hold, "the shim to reach restore step "+step)
	shim := d.ShimPid(name)
	if sid, _ := unix.Getsid(shim); sid == g.Cmd.Process.Pid {
		t.Fatalf("the shim (pid %d) is in ctr's session", shim)
	}
	return g, shim
}

// restoredRunsOn: the task runs, not stopped, with CUDA running.
func restoredRunsOn(t *testing.T, d *harness.Daemon, name string) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, name+" running", func() bool { return taskRuns(d, name) })
	pid := d.TaskPid(name)
	harness.WaitFor(t, 20*time.Second, "CUDA running in the restored container", func() bool {
		pg, err := fakecuda.ReadPage(pid)
		return err == nil && pg.State == 0
	})
	if st := procfs.State(pid); st == "T" || st == "t" {
		t.Fatalf("the restored process %d is stopped (%s)", pid, st)
	}
	// What the shim says is what was checked: the restore is done.
	done := false
	for _, line := range strings.Split(d.Log(), "\n") {
		done = done || strings.Contains(line, `msg="cryo: restore done"`) && strings.Contains(line, "id="+name+" ")
	}
	if !done {
		t.Errorf("the shim did not log the restore of %s as done", name)
	}
}

// taskExists reports whether the container has a task.
func taskExists(d *harness.Daemon, name string) bool {
	ctx := harness.NamespacedCtx()
	c, err := d.Client.LoadContainer(ctx, name)
	if err != nil {
		return false
	}
	_, err = c.Task(ctx, nil)
	return err == nil
}

// taskRuns reports whether the container has a running task.
func taskRuns(d *harness.Daemon, name string) bool {
	ctx := harness.NamespacedCtx()
	c, err := d.Client.LoadContainer(ctx, name)
	if err != nil {
		return false
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return false
	}
	st, err := task.Status(ctx)
	return err == nil && st.Status == client.Running
}
