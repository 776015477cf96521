package integration

// The pre-checkpoint and post-restore hooks through containerd and cryo's
// shim, named by the container's annotations (as CRI copies a pod's
// cryo.io/* annotations into each container's spec): HTTP hooks to the
// container's own loopback and exec hooks through containerd's exec, on
// fakecuda-app beside a busybox httpd whose CGI records each event after a
// fresh tick of the app.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/cryo-gpu/cryo/internal/hook"
)

const hookPort = 8000

// hookScript starts the CGI server on the container's loopback, port
// hookPort, and the app, its ticks both in the log and in /tmp/ticks for
// the CGI to count.
var hookScript = hookScriptOn(hookPort)

// hookScriptOn is hookScript with the CGI server on port.
func hookScriptOn(port int) string {
	return strings.ReplaceAll(hookScriptTmpl, "PORT", strconv.Itoa(port))
}

const hookScriptTmpl = `mkdir -p /tmp/www/cgi-bin && cd /tmp/www/cgi-bin &&
cat > ev <<'E'
#!/bin/sh
what=${QUERY_STRING:-$1}
n0=$(grep -c sum=OK /tmp/ticks); n=$n0; i=0
while [ "$n" -le "$n0" ] && [ $i -lt 300 ]; do sleep 0.01; i=$((i+1)); n=$(grep -c sum=OK /tmp/ticks); done
if [ "$n" -gt "$n0" ]; then e="$what after-tick $n"; else e="$what no-tick"; fi
echo "$e" >> /tmp/events
printf 'Content-Type: text/plain\r\n\r\n%s\n' "$e"
E
cat > slow <<'E'
#!/bin/sh
sleep 3
printf 'Content-Type: text/plain\r\n\r\nlate\n'
E
chmod +x ev slow
busybox httpd -f -p 127.0.0.1:PORT -h /tmp/www &
/bin/fakecuda-app 100 | busybox tee /tmp/ticks`

// runHookApp starts the hook workload in container id with annotations.
func runHookApp(d *daemon, id string, ann map[string]string) {
	d.t.Helper()
	d.runApp(id, oci.WithProcessArgs("/bin/sh", "-c", hookScript), oci.WithAnnotations(ann))
	pid := strconv.Itoa(d.taskPid(id))
	run(d.t, 10*time.Second, nil, "nsenter", "-t", pid, "-n", "ip", "link", "set", "lo", "up")
	waitFor(d.t, 10*time.Second, "the CGI server", func() bool {
		_, err := runErr(5*time.Second, nil, "nsenter", "-t", pid, "-n", "python3", "-c",
			"import socket; socket.create_connection(('127.0.0.1', 8000), 1)")
		return err == nil
	})
}

// containerEvents are the events the CGI recorded in container id.
func containerEvents(d *daemon, id string) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/root/tmp/events", d.taskPid(id)))
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "_"))
}

// checkpointFails runs `ctr task checkpoint` expecting a refusal, and
// checks that the task runs on, ticking, with no checkpoint image made.
func checkpointFails(d *daemon, id string, wants ...string) {
	d.t.Helper()
	ctx := namespacedCtx()
	before, _ := d.client.ImageService().List(ctx)
	out, err := d.ctrBinErr(d.bin+"/ctr", "task", "checkpoint", id)
	if err == nil {
		d.t.Fatalf("checkpoint of %s succeeded:\n%s", id, out)
	}
	wantIn(d.t, out+lastLines(d.log(), 40), wants...)
	after, _ := d.client.ImageService().List(ctx)
	if len(after) != len(before) {
		d.t.Fatalf("a failed pre-checkpoint hook left an image: %d images, %d before", len(after), len(before))
	}
	waitFor(d.t, 10*time.Second, id+" running", func() bool { return d.taskStatus(id) == client.Running })
	d.waitTicks(id, 3)
}

// logLine is the number of the first line of log holding every want, or -1.
func logLine(log string, wants ...string) int {
	for i, l := range strings.Split(log, "\n") {
		ok := true
		for _, w := range wants {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			return i
		}
	}
	return -1
}

func TestHooksShim(t *testing.T) {
	requireRoot(t)
	d := startDaemonWith(t, ctrdVersions[len(ctrdVersions)-1], false)
	d.importTestImage()
	httpHook := func(path string) string { return fmt.Sprintf("http:POST %s port=%d", path, hookPort) }

	t.Run("failing exec pre-hook", func(t *testing.T) {
		d := d.with(t)
		runHookApp(d, "hkf", map[string]string{hook.AnnPreCheckpoint: `exec:["/bin/sh","-c","echo model not loaded; exit 3"]`})
		defer d.remove("hkf")
		checkpointFails(d, "hkf", "pre-hook", "model not loaded", "exit status 3", "left running")
		if ev := containerEvents(d, "hkf"); len(ev) != 0 {
			t.Fatalf("events %v, want none", ev)
		}
	})
	t.Run("pre-hook deadline", func(t *testing.T) {
		d := d.with(t)
		runHookApp(d, "hks", map[string]string{hook.AnnPreCheckpoint: httpHook("/cgi-bin/slow"), hook.AnnPreCheckpointTimeout: "1s"})
		defer d.remove("hks")
		start := time.Now()
		checkpointFails(d, "hks", "timed out after 1s")
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("a 1s deadline took %s", took)
		}
	})
	t.Run("sleep, checkpoint, restore, wake", func(t *testing.T) {
		d := d.with(t)
		runHookApp(d, "hk", map[string]string{
			hook.AnnPreCheckpoint: httpHook("/cgi-bin/ev?sleep"),
			hook.AnnPostRestore:   "exec:/tmp/www/cgi-bin/ev wake",
		})
		defer d.remove("hk")
		ref, _ := d.taskCheckpoint("hk", "--exit")
		d.waitStopped("hk")
		// containerd pauses the task before its checkpoint: the GPU-free
		// pause runs the hook, then suspends CUDA.
		hookAt, suspendAt := logLine(d.log(), "id=hk ", "step=pre-hook"), logLine(d.log(), "id=hk ", "step=suspend")
		if hookAt < 0 || suspendAt < 0 || hookAt > suspendAt {
			t.Fatalf("the pre-checkpoint hook (line %d) must come before the suspend (line %d):\n%s", hookAt, suspendAt, lastLines(d.log(), 40))
		}
		d.restoreTask(ref, "hk")
		ev := containerEvents(d, "hk")
		if len(ev) != 2 {
			t.Fatalf("events %v, want sleep then wake", ev)
		}
		if slept, woke := eventTick(t, ev[0], "sleep"), eventTick(t, ev[1], "wake"); woke <= slept {
			t.Fatalf("woke after tick %d, slept after %d", woke, slept)
		}
		d.waitTicks("hk", 3)
	})
	t.Run("failing post-hook leaves the restored task running", func(t *testing.T) {
		d := d.with(t)
		runHookApp(d, "hkp", map[string]string{hook.AnnPostRestore: `exec:["/bin/sh","-c","echo weights missing >&2; exit 4"]`})
		defer d.remove("hkp")
		ref, _ := d.taskCheckpoint("hkp", "--exit")
		d.waitStopped("hkp")
		d.restoreTask(ref, "hkp")
		waitFor(t, 10*time.Second, "the shim's report", func() bool {
			l := d.log()
			return strings.Contains(l, "post-restore hook failed") && strings.Contains(l, "weights missing")
		})
		if st := d.taskStatus("hkp"); st != client.Running {
			t.Fatalf("restored task %s, want running", st)
		}
		d.waitTicks("hkp", 3)
	})
}
