package containerd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// testNetworkServer: through the shim, a server in a container with its own
// network namespace is checkpointed (--exit) and restored into the same
// container; it answers on its loopback, its count carried on.
func testNetworkServer(d *harness.Daemon) {
	const port = 7071
	ctx := harness.NamespacedCtx()
	img, err := d.Client.GetImage(ctx, harness.TestImage)
	if err != nil {
		d.T.Fatal(err)
	}
	c, err := d.Client.NewContainer(ctx, "net", client.WithImage(img), client.WithNewSnapshot("net-snap", img),
		client.WithRuntime(harness.CryoRuntime, nil), client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("/bin/netserver", strconv.Itoa(port))))
	if err != nil {
		d.T.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(d.Dir, "logs"), 0o755)
	task, err := c.NewTask(ctx, cio.LogFile(d.LogPath("net")))
	if err != nil {
		d.T.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		d.T.Fatal(err)
	}
	t := d.T
	harness.Run(t, 10*time.Second, nil, "nsenter", "-t", strconv.Itoa(int(task.Pid())), "-n", "ip", "link", "set", "lo", "up")
	harness.WaitFor(t, 10*time.Second, "the server", func() bool { return strings.Contains(harness.ReadFile(d.LogPath("net")), "listening") })
	if a, b := harness.PingIn(t, int(task.Pid()), port); a != 1 || b != 2 {
		t.Fatalf("before the checkpoint: %d %d", a, b)
	}
	ref, _ := d.TaskCheckpoint("net", "--exit")
	d.WaitStopped("net")
	d.RestoreTask(ref, "net")
	if a, b := harness.PingIn(t, d.TaskPid("net"), port); a != 3 || b != 4 {
		t.Fatalf("after the restore the server answered %d and %d, want 3 and 4", a, b)
	}
	d.Remove("net")
}

// testNetworkTCP: through the shim, a server on the host's network keeps an
// established connection across a checkpoint with open_tcp and a restore,
// which passes tcp-established to CRIU by itself. A checkpoint without
// open_tcp is refused, naming the option, and the server goes on; so is
// one after the restore, whose tcp-established applied to it alone.
func testNetworkTCP(d *harness.Daemon) {
	t := d.T
	port := testsupport.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx := harness.NamespacedCtx()
	img, err := d.Client.GetImage(ctx, harness.TestImage)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Client.NewContainer(ctx, "tcp", client.WithImage(img), client.WithNewSnapshot("tcp-snap", img),
		client.WithRuntime(harness.CryoRuntime, nil), client.WithNewSpec(oci.WithImageConfig(img),
			oci.WithHostNamespace(specs.NetworkNamespace), oci.WithProcessArgs("/bin/netserver", strconv.Itoa(port))))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(d.Dir, "logs"), 0o755)
	task, err := c.NewTask(ctx, cio.LogFile(d.LogPath("tcp")))
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn := harness.DialServer(t, addr)
	if n := conn.MustPing(); n != 1 {
		t.Fatalf("first answer %d", n)
	}
	d.RefusedTCPCheckpoint("tcp", conn, 2)

	ckpt, err := d.Task("tcp").Checkpoint(ctx, harness.WithCheckpointOptions(&options.CheckpointOptions{Exit: true, OpenTcp: true}))
	if err != nil {
		t.Fatalf("checkpoint with open_tcp: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	d.WaitStopped("tcp")
	d.RestoreTask(ckpt.Name(), "tcp")
	harness.WantIn(t, d.Log(), "restoring with tcp-established")
	harness.CarriedOn(t, conn, addr, 3)
	d.RefusedTCPCheckpoint("tcp", conn, 6)
	d.Remove("tcp")
}
