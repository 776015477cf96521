package containerd

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestContainerdTerminal checkpoints and restores a terminal container on
// containerd 2.x through the cryo shim, as containerd's own
// TestCheckpointRestorePTY does: a shell that echoes each line it reads,
// its stdio FIFOs behind a pty, checkpointed with its task (--exit), and
// restored into a new container of the checkpoint. runc binds the pty at
// /dev/console of every terminal container, outside the spec's mounts: the
// restore is not refused for it, and the shell answers on the restored pty.
func TestContainerdTerminal(t *testing.T) {
	harness.RequireRoot(t)
	d := harness.NewDaemon(t, harness.CtrdVersions[1], false)
	d.Start()
	d.ImportTestImage()
	ctx := harness.NamespacedCtx()
	id := "tty"
	c := d.NewContainerOf(harness.TestImage, id, nil, oci.WithProcessArgs("sh", "-c", "while read A; do echo z${A}z; done"), oci.WithTTY)
	t.Cleanup(func() { d.Remove(id) })
	tty := newTTYIO(t, d, id)
	task, err := c.NewTask(ctx, tty.Create)
	if err != nil {
		t.Fatalf("new task: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	exited, err := task.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tty.say("one", "zonez")

	ckpt, err := c.Checkpoint(ctx, "localhost/cryo/checkpoint:tty", client.WithCheckpointRuntime,
		client.WithCheckpointRW, client.WithCheckpointTaskExit, client.WithCheckpointTask)
	if err != nil {
		t.Fatalf("checkpoint of a terminal container: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the checkpointed task did not exit")
	}
	if _, err := task.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	tty.close()
	if err := c.Delete(ctx, client.WithSnapshotCleanup); err != nil {
		t.Fatal(err)
	}

	restored := "tty-restored"
	t.Cleanup(func() { d.Remove(restored) })
	rc, err := d.Client.Restore(ctx, restored, ckpt, client.WithRestoreImage, client.WithRestoreSpec,
		client.WithRestoreRuntime, client.WithRestoreRW)
	if err != nil {
		t.Fatalf("restore the container: %v", err)
	}
	tty = newTTYIO(t, d, restored)
	task, err = rc.NewTask(ctx, tty.Create, client.WithTaskCheckpoint(ckpt))
	if err != nil {
		t.Fatalf("restore of a terminal container: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start the restored task: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	tty.say("two", "ztwoz") // the same shell, on its restored pty
	tty.close()
}

// ttyIO is a task's stdio as FIFOs behind its pty, and what came out.
type ttyIO struct {
	t    *testing.T
	dio  *cio.DirectIO
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func newTTYIO(t *testing.T, d *harness.Daemon, id string) *ttyIO {
	t.Helper()
	fifos, err := cio.NewFIFOSetInDir(filepath.Join(d.Dir, "fifos"), id, true)
	if err != nil {
		t.Fatal(err)
	}
	dio, err := cio.NewDirectIO(harness.NamespacedCtx(), fifos)
	if err != nil {
		t.Fatal(err)
	}
	io := &ttyIO{t: t, dio: dio, done: make(chan struct{})}
	go io.copy()
	t.Cleanup(io.close)
	return io
}

func (tio *ttyIO) Create(string) (cio.IO, error) { return tio.dio, nil }

func (tio *ttyIO) copy() {
	defer close(tio.done)
	buf := make([]byte, 4096)
	for {
		n, err := tio.dio.Stdout.Read(buf)
		tio.mu.Lock()
		tio.out.Write(buf[:n])
		tio.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// say writes a line to the pty and waits for the shell's answer.
func (tio *ttyIO) say(line, answer string) {
	tio.t.Helper()
	if _, err := io.WriteString(tio.dio.Stdin, line+"\n"); err != nil {
		tio.t.Fatal(err)
	}
	harness.WaitFor(tio.t, 20*time.Second, "the shell's "+answer, func() bool {
		tio.mu.Lock()
		defer tio.mu.Unlock()
		return strings.Contains(tio.out.String(), answer)
	})
}

func (tio *ttyIO) close() {
	if tio.dio == nil {
		return
	}
	tio.dio.Cancel()
	tio.dio.Close()
	tio.dio = nil
}
