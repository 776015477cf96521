package integration

// A restore whose task is deleted while the shim's Start runs it, the
// way containerd's CRI deletes the task of a StartContainer it gave up
// on: the client's Delete with WithProcessKill, which kills no task whose
// pid the client has not learnt (a restored task has none until its Start
// returns). The shim ends the restore and the task, and the Delete
// answers with the killed tree's exit status.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	client "github.com/containerd/containerd/v2/client"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// TestShimRestoreDeletedMidStart: on containerd 1.7 and 2.x, `ctr
// container restore --live` is held before the CUDA resume, after CRIU's
// restore, and the task is deleted as CRI deletes it. The Delete waits
// for the restore to end, then answers 137 (SIGKILL); the restore fails;
// no task and no restored process is left.
func TestShimRestoreDeletedMidStart(t *testing.T) {
	for _, v := range ctrdVersions {
		t.Run(v.name, func(t *testing.T) {
			setting := filepath.Join(t.TempDir(), "hold-setting")
			d := newDaemon(t, v, false)
			d.envExtra = []string{"PATH=" + filepath.Dir(failpointBin(t, "containerd-shim-cryo-v2")) + ":" + binDir() + ":" + d.bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
				"CRYO_TEST_HOLD=@" + setting}
			d.start()
			d.importTestImage()
			src := uniqueID("src")
			d.runApp(src)
			ref := "localhost/ckpt/" + src + ":1"
			d.containerCheckpoint(src, ref)
			d.remove(src)

			name := uniqueID("rd")
			t.Cleanup(func() { d.remove(name) })
			g, shim := heldCtrRestore(t, d, setting, string(orchestrate.StepResume), name, ref)
			restored := childrenNamed(shim, "fakecuda-app")
			if len(restored) == 0 {
				t.Fatalf("no restored process under the shim (pid %d) before the CUDA resume", shim)
			}
			code, err := deleteAsCRI(t, d, name, filepath.Join(filepath.Dir(setting), "hold"))
			if err != nil {
				t.Fatalf("the task's Delete: %v\n%s", err, lastLines(d.log(), 30))
			}
			if code != 128+uint32(syscall.SIGKILL) {
				t.Errorf("the Delete answered exit status %d, want %d (the restored tree killed)", code, 128+syscall.SIGKILL)
			}
			c := g.wait(t)
			if c == 0 {
				t.Errorf("ctr container restore succeeded for a task deleted during its restore:\n%s", g.out)
			}
			t.Logf("ctr container restore exited %d: %s", c, g.out)
			if taskExists(d, name) {
				t.Errorf("a task of %s is left after its Delete", name)
			}
			for _, pid := range restored {
				waitFor(t, 10*time.Second, "restored pid "+strconv.Itoa(pid)+" to be gone", func() bool { return !procfs.Alive(pid) })
			}
		})
	}
}

// deleteAsCRI deletes name's task as containerd's CRI does after a failed
// StartContainer (task.Delete with WithProcessKill, a one-minute
// deadline), releasing the hold once the shim has noted the Delete, and
// returns the exit status it answered.
func deleteAsCRI(t *testing.T, d *daemon, name, hold string) (uint32, error) {
	t.Helper()
	ctx := namespacedCtx()
	c, err := d.client.LoadContainer(ctx, name)
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
		if logLine(d.log(), `msg="cryo: restore given up`, "id="+name+" ") >= 0 {
			os.Remove(hold)
		}
		if time.Now().After(end) {
			t.Fatalf("the Delete did not answer within 30 s\n%s", lastLines(d.log(), 30))
		}
	}
}
