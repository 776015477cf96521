package containerd

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// TestShimRestoreDeletedMidStart: on containerd 1.7 and 2.x, `ctr
// container restore --live` is held before the CUDA resume, after CRIU's
// restore, and the task is deleted as CRI deletes it. The Delete waits
// for the restore to end, then answers 137 (SIGKILL); the restore fails;
// no task and no restored process is left.
func TestShimRestoreDeletedMidStart(t *testing.T) {
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) {
			setting := filepath.Join(t.TempDir(), "hold-setting")
			d := harness.NewDaemon(t, v, false)
			d.EnvExtra = []string{"PATH=" + filepath.Dir(harness.FailpointBin(t, "containerd-shim-cryo-v2")) + ":" + harness.BinDir() + ":" + d.Bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
				"CRYO_TEST_HOLD=@" + setting}
			d.Start()
			d.ImportTestImage()
			src := harness.UniqueID("src")
			d.RunApp(src)
			ref := "localhost/ckpt/" + src + ":1"
			d.ContainerCheckpoint(src, ref)
			d.Remove(src)

			name := harness.UniqueID("rd")
			t.Cleanup(func() { d.Remove(name) })
			g, shim := heldCtrRestore(t, d, setting, string(orchestrate.StepResume), name, ref)
			restored := harness.ChildrenNamed(shim, "fakecuda-app")
			if len(restored) == 0 {
				t.Fatalf("no restored process under the shim (pid %d) before the CUDA resume", shim)
			}
			code, err := deleteAsCRI(t, d, name, filepath.Join(filepath.Dir(setting), "hold"))
			if err != nil {
				t.Fatalf("the task's Delete: %v\n%s", err, harness.LastLines(d.Log(), 30))
			}
			if code != 128+uint32(syscall.SIGKILL) {
				t.Errorf("the Delete answered exit status %d, want %d (the restored tree killed)", code, 128+syscall.SIGKILL)
			}
			c := g.Wait(t)
			if c == 0 {
				t.Errorf("ctr container restore succeeded for a task deleted during its restore:\n%s", g.Out)
			}
			t.Logf("ctr container restore exited %d: %s", c, g.Out)
			if taskExists(d, name) {
				t.Errorf("a task of %s is left after its Delete", name)
			}
			for _, pid := range restored {
				harness.WaitFor(t, 10*time.Second, "restored pid "+strconv.Itoa(pid)+" to be gone", func() bool { return !procfs.Alive(pid) })
			}
		})
	}
}

// deleteAsCRI deletes name's task as containerd's CRI does after a failed
// StartContainer (task.Delete with WithProcessKill, a one-minute
// deadline), releasing the hold once the shim has noted the Delete, and
// returns the exit status it answered.
func deleteAsCRI(t *testing.T, d *harness.Daemon, name, hold string) (uint32, error) {
	t.Helper()
	ctx := harness.NamespacedCtx()
	c, err := d.Client.LoadContainer(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if task.Pid() != 0 {
		t.Errorf("the task has pid %d during its restore's Start: containerd's client would not send the Delete", task.Pid())
	}
	type answer struct {
		st  *client.ExitStatus
		err error
	}
	done := make(chan answer, 1)
	go func() {
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		st, err := task.Delete(dctx, client.WithProcessKill)
		done <- answer{st, err}
	}()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case a := <-done:
			if a.err != nil {
				return 0, a.err
			}
			return a.st.ExitCode(), nil
		default:
		}
		if harness.LogLine(d.Log(), `msg="cryo: restore given up`, "id="+name+" ") >= 0 {
			os.Remove(hold)
		}
		if time.Now().After(end) {
			t.Fatalf("the Delete did not answer within 30 s\n%s", harness.LastLines(d.Log(), 30))
		}
	}
}
