package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
)

// TestContainerd runs cryo's shim under containerd 1.7 and 2.x, each started
// by the test with its own root, state and socket, and the fake CUDA driver.
// Subtests share one daemon per version and its imported test image.
// containerd's CRYO_CRIU is a CRIU that is not on PATH: runc must run it.
func TestContainerd(t *testing.T) {
	requireRoot(t)
	for _, v := range ctrdVersions {
		t.Run(v.name, func(t *testing.T) {
			start := time.Now()
			d := newDaemon(t, v, false)
			criu := newLoggingCRIU(t)
			d.criu = &criu
			d.start()
			d.importTestImage()
			for _, c := range containerdCases {
				t.Run(c.name, func(t *testing.T) {
					began := time.Now()
					c.run(d.with(t))
					t.Logf("%s/%s took %s", v.name, c.name, time.Since(began).Round(time.Millisecond))
				})
			}
			t.Logf("%s took %s", v.name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// with returns the daemon bound to a subtest's testing.T.
func (d *daemon) with(t testing.TB) *daemon {
	c := *d
	c.t = t
	return &c
}

var containerdCases = []struct {
	name string
	run  func(d *daemon)
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
func testTaskCheckpointClone(d *daemon) {
	d.runApp("tc")
	ref, before := d.taskCheckpoint("tc")
	d.waitTicks("tc", 3) // leave-running: the original goes on
	if st := d.taskStatus("tc"); st != client.Running {
		d.t.Fatalf("original after checkpoint: %s, want running", st)
	}
	m := d.checkpointManifest(ref)
	if len(m.Processes) != 1 || len(m.Digests) == 0 {
		d.t.Fatalf("manifest: %d CUDA processes, %d digests; want 1 and some", len(m.Processes), len(m.Digests))
	}
	d.checkStepOrder("tc")

	d.restoreTask(ref, "tc-clone")
	d.waitTicks("tc-clone", 3)
	assertContinues(d.t, d.logPath("tc-clone"), before)
	d.remove("tc-clone")
	d.remove("tc")
}

// testTaskCheckpointExit: `ctr task checkpoint --exit` stops the task; the
// checkpoint restores into the same container and the counter carries on.
func testTaskCheckpointExit(d *daemon) {
	d.runApp("te")
	ref, before := d.taskCheckpoint("te", "--exit")
	d.waitStopped("te")
	_ = os.Rename(d.logPath("te"), d.logPath("te")+".before")
	d.restoreTask(ref, "te")
	d.waitTicks("te", 3)
	assertContinues(d.t, d.logPath("te"), before)
	d.remove("te")
}

// testContainerCheckpointRestore: `ctr container checkpoint --task --rw`
// then `ctr container restore --live --rw` into a new container; runc
// dumps and restores with containerd's CRYO_CRIU.
func testContainerCheckpointRestore(d *daemon) {
	d.runApp("cc")
	ref := "localhost/cryo/checkpoint:cc"
	before := d.containerCheckpoint("cc", ref)
	dumps := d.criu.runcSwrks()
	if dumps == 0 {
		d.t.Fatalf("runc did not dump with containerd's CRYO_CRIU=%s", d.criu.path)
	}
	d.remove("cc")
	d.ctr("container", "restore", "--live", "--rw", "cc-restored", ref)
	if d.criu.runcSwrks() == dumps {
		d.t.Fatalf("runc did not restore with containerd's CRYO_CRIU=%s", d.criu.path)
	}
	d.attach("cc-restored")
	d.waitTicks("cc-restored", 3)
	assertContinues(d.t, d.logPath("cc-restored"), before)
	d.remove("cc-restored")
}

// testRepeatedCheckpoints: three container checkpoints of one running
// container in a row, each restored. containerd 1.7 needs cryo's remedy
// for this (docs/containerd.md, "Repeated checkpoints on containerd 1.7").
func testRepeatedCheckpoints(d *daemon) {
	d.runApp("rp")
	var refs []string
	var befores []int
	for i := 1; i <= 3; i++ {
		ref := "localhost/cryo/checkpoint:rp" + string(rune('0'+i))
		befores = append(befores, d.containerCheckpoint("rp", ref))
		refs = append(refs, ref)
		d.waitTicks("rp", 2)
	}
	for i, ref := range refs {
		id := "rp-r" + string(rune('1'+i))
		d.ctr("container", "restore", "--live", "--rw", id, ref)
		d.attach(id)
		d.waitTicks(id, 2)
		assertContinues(d.t, d.logPath(id), befores[i])
		d.remove(id)
	}
	d.remove("rp")
}

// testCUDAFaultRollsBack: the fake driver fails the CUDA checkpoint; the
// checkpoint fails, naming the step, and the container runs on.
func testCUDAFaultRollsBack(d *daemon) {
	d.runApp("cf")
	fault := filepath.Join(d.faults, "checkpoint")
	if err := os.WriteFile(fault, []byte("error 2\n"), 0o644); err != nil {
		d.t.Fatal(err)
	}
	defer os.Remove(fault)
	out, err := d.ctrErr("task", "checkpoint", "cf")
	if err == nil || !strings.Contains(out, "suspend") {
		d.t.Fatalf("checkpoint with a CUDA fault: err=%v, want a failure naming the suspend step:\n%s", err, out)
	}
	d.assertRunsOn("cf")
	d.remove("cf")
}

// testCRIUFailureRollsBack: runc's checkpoint (CRIU) fails, through a runc
// wrapper given as the runc option BinaryName; CUDA is resumed and the
// container runs on.
func testCRIUFailureRollsBack(d *daemon) {
	wrapper := filepath.Join(d.dir, "failing-runc")
	script := "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = checkpoint ] && { echo 'injected CRIU failure' >&2; exit 1; }; done\nexec runc \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		d.t.Fatal(err)
	}
	c := d.newContainer("cr", &options.Options{BinaryName: wrapper})
	d.startApp(c)
	out, err := d.ctrErr("task", "checkpoint", "cr")
	if err == nil || !strings.Contains(out, "dump") {
		d.t.Fatalf("checkpoint with a CRIU failure: err=%v, want a failure naming the dump step:\n%s", err, out)
	}
	d.assertRunsOn("cr")
	d.remove("cr")
}

// assertRunsOn checks that a task is running (not paused) and ticking, its
// CUDA state running.
func (d *daemon) assertRunsOn(id string) {
	d.t.Helper()
	waitFor(d.t, 10*time.Second, id+" running", func() bool { return d.taskStatus(id) == client.Running })
	d.waitTicks(id, 3)
}

// assertContinues checks that a restored log starts after the tick seen
// before the checkpoint: the counter carried on instead of starting over.
func assertContinues(t testing.TB, path string, before int) {
	t.Helper()
	ts := ctrdTicks(t, path)
	if len(ts) == 0 {
		t.Fatalf("%s: no ticks", path)
	}
	if ts[0] <= before || ts[0] > before+100 {
		t.Fatalf("%s: first tick after restore %d, want just after %d (the counter must carry on)", path, ts[0], before)
	}
	t.Logf("%s: ticks carried on: %d before the checkpoint, %d..%d after", filepath.Base(path), before, ts[0], ts[len(ts)-1])
}

// checkStepOrder checks the shim's log: containerd's pause before the
// checkpoint suspended CUDA and then froze the task (the GPU-free pause);
// the checkpoint thawed it, found CUDA suspended and dumped it as it was;
// containerd's resume after the checkpoint thawed the task, then resumed
// CUDA.
func (d *daemon) checkStepOrder(id string) {
	d.t.Helper()
	var steps []string
	for _, line := range strings.Split(d.log(), "\n") {
		if !strings.Contains(line, "cryo: step done") || !strings.Contains(line, "id="+id+" ") {
			continue
		}
		if i := strings.Index(line, "step="); i >= 0 {
			steps = append(steps, strings.Fields(line[i+5:])[0])
		}
	}
	want := []string{"find", "inventory", "suspend", "record", "freeze", // pause
		"thaw", "find", "inventory", "manifest", "dump", "digests", // checkpoint
		"thaw", "resume"} // resume
	if strings.Join(steps, " ") != strings.Join(want, " ") {
		d.t.Fatalf("checkpoint steps of %s: %v, want %v", id, steps, want)
	}
}
