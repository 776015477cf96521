package containerd

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/hook"
)

const hookPort = 8000

// hookScript starts the CGI server on the container's loopback, port
// hookPort, and the app, its ticks both in the log and in /tmp/ticks for
// the CGI to count.
var hookScript = harness.HookScriptOn(hookPort)

// runHookApp starts the hook workload in container id with annotations.
func runHookApp(d *harness.Daemon, id string, ann map[string]string) {
	d.T.Helper()
	d.RunApp(id, oci.WithProcessArgs("/bin/sh", "-c", hookScript), oci.WithAnnotations(ann))
	pid := strconv.Itoa(d.TaskPid(id))
	harness.Run(d.T, 10*time.Second, nil, "nsenter", "-t", pid, "-n", "ip", "link", "set", "lo", "up")
	harness.WaitFor(d.T, 10*time.Second, "the CGI server", func() bool {
		_, err := harness.RunErr(5*time.Second, nil, "nsenter", "-t", pid, "-n", "python3", "-c",
			"import socket; socket.create_connection(('127.0.0.1', 8000), 1)")
		return err == nil
	})
}

// containerEvents are the events the CGI recorded in container id.
func containerEvents(d *harness.Daemon, id string) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/root/tmp/events", d.TaskPid(id)))
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "_"))
}

// checkpointFails runs `ctr task checkpoint` expecting a refusal, and
// checks that the task runs on, ticking, with no checkpoint image made.
func checkpointFails(d *harness.Daemon, id string, wants ...string) {
	d.T.Helper()
	ctx := harness.NamespacedCtx()
	before, _ := d.Client.ImageService().List(ctx)
	out, err := d.CtrBinErr(d.Bin+"/ctr", "task", "checkpoint", id)
	if err == nil {
		d.T.Fatalf("checkpoint of %s succeeded:\n%s", id, out)
	}
	harness.WantIn(d.T, out+harness.LastLines(d.Log(), 40), wants...)
	after, _ := d.Client.ImageService().List(ctx)
	if len(after) != len(before) {
		d.T.Fatalf("a failed pre-checkpoint hook left an image: %d images, %d before", len(after), len(before))
	}
	harness.WaitFor(d.T, 10*time.Second, id+" running", func() bool { return d.TaskStatus(id) == client.Running })
	d.WaitTicks(id, 3)
}

func TestHooksShim(t *testing.T) {
	harness.RequireRoot(t)
	d := harness.StartDaemonWith(t, harness.CtrdVersions[len(harness.CtrdVersions)-1], false)
	d.ImportTestImage()
	httpHook := func(path string) string { return fmt.Sprintf("http:POST %s port=%d", path, hookPort) }

	t.Run("failing exec pre-hook", func(t *testing.T) {
		d := d.With(t)
		runHookApp(d, "hkf", map[string]string{hook.AnnPreCheckpoint: `exec:["/bin/sh","-c","echo model not loaded; exit 3"]`})
		defer d.Remove("hkf")
		checkpointFails(d, "hkf", "pre-hook", "model not loaded", "exit status 3", "left running")
		if ev := containerEvents(d, "hkf"); len(ev) != 0 {
			t.Fatalf("events %v, want none", ev)
		}
	})
	t.Run("pre-hook deadline", func(t *testing.T) {
		d := d.With(t)
		runHookApp(d, "hks", map[string]string{hook.AnnPreCheckpoint: httpHook("/cgi-bin/slow"), hook.AnnPreCheckpointTimeout: "1s"})
		defer d.Remove("hks")
		start := time.Now()
		checkpointFails(d, "hks", "timed out after 1s")
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("a 1s deadline took %s", took)
		}
	})
	t.Run("sleep, checkpoint, restore, wake", func(t *testing.T) {
		d := d.With(t)
		runHookApp(d, "hk", map[string]string{
			hook.AnnPreCheckpoint: httpHook("/cgi-bin/ev?sleep"),
			hook.AnnPostRestore:   "exec:/tmp/www/cgi-bin/ev wake",
		})
		defer d.Remove("hk")
		ref, _ := d.TaskCheckpoint("hk", "--exit")
		d.WaitStopped("hk")
		// containerd pauses the task before its checkpoint: the GPU-free
		// pause runs the hook, then suspends CUDA.
		hookAt, suspendAt := harness.LogLine(d.Log(), "id=hk ", "step=pre-hook"), harness.LogLine(d.Log(), "id=hk ", "step=suspend")
		if hookAt < 0 || suspendAt < 0 || hookAt > suspendAt {
			t.Fatalf("the pre-checkpoint hook (line %d) must come before the suspend (line %d):\n%s", hookAt, suspendAt, harness.LastLines(d.Log(), 40))
		}
		d.RestoreTask(ref, "hk")
		ev := containerEvents(d, "hk")
		if len(ev) != 2 {
			t.Fatalf("events %v, want sleep then wake", ev)
		}
		if slept, woke := harness.EventTick(t, ev[0], "sleep"), harness.EventTick(t, ev[1], "wake"); woke <= slept {
			t.Fatalf("woke after tick %d, slept after %d", woke, slept)
		}
		d.WaitTicks("hk", 3)
	})
	t.Run("failing post-hook leaves the restored task running", func(t *testing.T) {
		d := d.With(t)
		runHookApp(d, "hkp", map[string]string{hook.AnnPostRestore: `exec:["/bin/sh","-c","echo weights missing >&2; exit 4"]`})
		defer d.Remove("hkp")
		ref, _ := d.TaskCheckpoint("hkp", "--exit")
		d.WaitStopped("hkp")
		d.RestoreTask(ref, "hkp")
		harness.WaitFor(t, 10*time.Second, "the shim's report", func() bool {
			l := d.Log()
			return strings.Contains(l, "post-restore hook failed") && strings.Contains(l, "weights missing")
		})
		if st := d.TaskStatus("hkp"); st != client.Running {
			t.Fatalf("restored task %s, want running", st)
		}
		d.WaitTicks("hkp", 3)
	})
}
