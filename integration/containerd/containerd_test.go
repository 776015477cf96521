package containerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestContainerd runs cryo's shim under containerd 1.7 and 2.x, each started
// by the test with its own root, state and socket, and the fake CUDA driver.
// Subtests share one daemon per version and its imported test image.
// containerd's CRYO_CRIU is a CRIU that is not on PATH: runc must run it.
func TestContainerd(t *testing.T) {
	harness.RequireRoot(t)
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) {
			start := time.Now()
			d := harness.NewDaemon(t, v, false)
			criu := harness.NewLoggingCRIU(t)
			d.CRIU = &criu
			d.Start()
			d.ImportTestImage()
			for _, c := range containerdCases {
				t.Run(c.name, func(t *testing.T) {
					began := time.Now()
					c.run(d.With(t))
					t.Logf("%s/%s took %s", v.Name, c.name, time.Since(began).Round(time.Millisecond))
				})
			}
			t.Logf("%s took %s", v.Name, time.Since(start).Round(time.Millisecond))
		})
	}
}

var containerdCases = []struct {
	name string
	run  func(d *harness.Daemon)
}{
	{"TaskCheckpointLeaveRunningAndClone", testTaskCheckpointClone},
	{"TaskCheckpointExitRestore", testTaskCheckpointExit},
	{"ContainerCheckpointRestore", testContainerCheckpointRestore},
	{"RepeatedContainerCheckpoints", testRepeatedCheckpoints},
	{"CUDAFaultRollsBack", testCUDAFaultRollsBack},
	{"CRIUFailureRollsBack", testCRIUFailureRollsBack},
	{"ConcurrentTaskCheckpoints", testConcurrentTaskCheckpoints},
	{"MultiGPUMoveToOtherGPU", testMultiGPUMove},
	{"ImageRestoreOnOtherGPU", testImageRestoreOtherGPU},
	{"NetworkServer", testNetworkServer},
	{"NetworkTCPEstablished", testNetworkTCP},
	{"PauseResume", testTaskPauseResume},
	{"PauseRefused", testPauseRefused},
}

// testTaskCheckpointClone: `ctr task checkpoint` leaves the original
// running; the image holds the GPU manifest inside the CRIU tar; a restore
// into a new container while the original runs carries the tick counter
// on; the CUDA steps ran in order around containerd's pause.
func testTaskCheckpointClone(d *harness.Daemon) {
	d.RunApp("tc")
	ref, before := d.TaskCheckpoint("tc")
	d.WaitTicks("tc", 3) // leave-running: the original goes on
	if st := d.TaskStatus("tc"); st != client.Running {
		d.T.Fatalf("original after checkpoint: %s, want running", st)
	}
	m := d.CheckpointManifest(ref)
	if len(m.Processes) != 1 || len(m.Digests) == 0 {
		d.T.Fatalf("manifest: %d CUDA processes, %d digests; want 1 and some", len(m.Processes), len(m.Digests))
	}
	d.CheckStepOrder("tc")

	d.RestoreTask(ref, "tc-clone")
	d.WaitTicks("tc-clone", 3)
	harness.AssertContinues(d.T, d.LogPath("tc-clone"), before)
	d.Remove("tc-clone")
	d.Remove("tc")
}

// testTaskCheckpointExit: `ctr task checkpoint --exit` stops the task; the
// checkpoint restores into the same container and the counter carries on.
func testTaskCheckpointExit(d *harness.Daemon) {
	d.RunApp("te")
	ref, before := d.TaskCheckpoint("te", "--exit")
	d.WaitStopped("te")
	_ = os.Rename(d.LogPath("te"), d.LogPath("te")+".before")
	d.RestoreTask(ref, "te")
	d.WaitTicks("te", 3)
	harness.AssertContinues(d.T, d.LogPath("te"), before)
	d.Remove("te")
}

// testContainerCheckpointRestore: `ctr container checkpoint --task --rw`
// then `ctr container restore --live --rw` into a new container; runc
// dumps and restores with containerd's CRYO_CRIU.
func testContainerCheckpointRestore(d *harness.Daemon) {
	d.RunApp("cc")
	ref := "localhost/cryo/checkpoint:cc"
	before := d.ContainerCheckpoint("cc", ref)
	dumps := d.CRIU.RuncSwrks()
	if dumps == 0 {
		d.T.Fatalf("runc did not dump with containerd's CRYO_CRIU=%s", d.CRIU.Path)
	}
	d.Remove("cc")
	d.Ctr("container", "restore", "--live", "--rw", "cc-restored", ref)
	if d.CRIU.RuncSwrks() == dumps {
		d.T.Fatalf("runc did not restore with containerd's CRYO_CRIU=%s", d.CRIU.Path)
	}
	d.Attach("cc-restored")
	d.WaitTicks("cc-restored", 3)
	harness.AssertContinues(d.T, d.LogPath("cc-restored"), before)
	d.Remove("cc-restored")
}

// testRepeatedCheckpoints: three container checkpoints of one running
// container in a row, each restored. containerd 1.7 needs cryo's remedy
// for this (docs/containerd.md, "Repeated checkpoints on containerd 1.7").
func testRepeatedCheckpoints(d *harness.Daemon) {
	d.RunApp("rp")
	var refs []string
	var befores []int
	for i := 1; i <= 3; i++ {
		ref := "localhost/cryo/checkpoint:rp" + string(rune('0'+i))
		befores = append(befores, d.ContainerCheckpoint("rp", ref))
		refs = append(refs, ref)
		d.WaitTicks("rp", 2)
	}
	for i, ref := range refs {
		id := "rp-r" + string(rune('1'+i))
		d.Ctr("container", "restore", "--live", "--rw", id, ref)
		d.Attach(id)
		d.WaitTicks(id, 2)
		harness.AssertContinues(d.T, d.LogPath(id), befores[i])
		d.Remove(id)
	}
	d.Remove("rp")
}

// testCUDAFaultRollsBack: the fake driver fails the CUDA checkpoint; the
// checkpoint fails, naming the step, and the container runs on.
func testCUDAFaultRollsBack(d *harness.Daemon) {
	d.RunApp("cf")
	fault := filepath.Join(d.Faults, "checkpoint")
	if err := os.WriteFile(fault, []byte("error 2\n"), 0o644); err != nil {
		d.T.Fatal(err)
	}
	defer os.Remove(fault)
	out, err := d.CtrErr("task", "checkpoint", "cf")
	if err == nil || !strings.Contains(out, "suspend") {
		d.T.Fatalf("checkpoint with a CUDA fault: err=%v, want a failure naming the suspend step:\n%s", err, out)
	}
	d.AssertRunsOn("cf")
	d.Remove("cf")
}

// testCRIUFailureRollsBack: runc's checkpoint (CRIU) fails, through a runc
// wrapper given as the runc option BinaryName; CUDA is resumed and the
// container runs on.
func testCRIUFailureRollsBack(d *harness.Daemon) {
	wrapper := filepath.Join(d.Dir, "failing-runc")
	script := "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = checkpoint ] && { echo 'injected CRIU failure' >&2; exit 1; }; done\nexec runc \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		d.T.Fatal(err)
	}
	c := d.NewContainer("cr", &options.Options{BinaryName: wrapper})
	d.StartApp(c)
	out, err := d.CtrErr("task", "checkpoint", "cr")
	if err == nil || !strings.Contains(out, "dump") {
		d.T.Fatalf("checkpoint with a CRIU failure: err=%v, want a failure naming the dump step:\n%s", err, out)
	}
	d.AssertRunsOn("cr")
	d.Remove("cr")
}
