package integration

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// testTaskPauseResume: `ctr task pause` suspends CUDA (the fake driver
// reports the process checkpointed, its device memory given up) and then
// freezes the task; `ctr task resume` thaws it and brings CUDA back with
// its device memory intact (every tick checks it). A checkpoint of the
// paused task dumps it as it is, records the GPU memory it held, leaves it
// paused, and restores.
func testTaskPauseResume(d *daemon) {
	d.runApp("pz")
	pid := d.taskPid("pz")
	d.pauseAndCheck("pz", pid)
	// containerd refuses to delete a paused task; the pause record stays,
	// so the resume still brings CUDA back.
	if out, err := d.ctrErr("task", "delete", "pz"); err == nil {
		d.t.Fatalf("ctr task delete of a paused task succeeded:\n%s", out)
	}
	d.ctr("task", "resume", "pz")
	d.assertRunsOn("pz")
	if p, err := fakecuda.ReadPage(pid); err != nil || p.State != 0 || p.Restores != 1 {
		d.t.Fatalf("CUDA after a refused delete and ctr task resume: %+v (%v), want running after one restore", p, err)
	}

	d.pauseAndCheck("pz", pid)
	ref, before := d.taskCheckpoint("pz")
	// containerd leaves a task that was paused before its checkpoint
	// paused: CUDA stays suspended until the user's resume.
	if st := d.taskStatus("pz"); st != client.Paused {
		d.t.Fatalf("paused task after its checkpoint: %s, want still paused", st)
	}
	if p, err := fakecuda.ReadPage(pid); err != nil || p.State != 2 {
		d.t.Fatalf("CUDA of the paused task after its checkpoint: %+v (%v), want checkpointed", p, err)
	}
	d.ctr("task", "resume", "pz")
	d.assertRunsOn("pz")
	m := d.checkpointManifest(ref)
	if len(m.Processes) != 1 || !m.Processes[0].Paused || m.Processes[0].GPUMemory == 0 {
		d.t.Fatalf("manifest of the paused task: %+v, want its one CUDA process, paused, with the GPU memory it held", m.Processes)
	}
	d.restoreTask(ref, "pz-clone")
	d.waitTicks("pz-clone", 3)
	assertContinues(d.t, d.logPath("pz-clone"), before)
	d.remove("pz-clone")
	d.remove("pz")
}

// pauseAndCheck pauses id with ctr and checks that it is frozen with its
// CUDA state checkpointed.
func (d *daemon) pauseAndCheck(id string, pid int) {
	d.t.Helper()
	d.ctr("task", "pause", id)
	if st := d.taskStatus(id); st != client.Paused {
		d.t.Fatalf("%s after ctr task pause: %s, want paused", id, st)
	}
	p, err := fakecuda.ReadPage(pid)
	if err != nil || p.State != 2 || p.HoldsDevices && len(p.GPUs) == 0 {
		d.t.Fatalf("CUDA of %s after ctr task pause: %+v (%v), want checkpointed", id, p, err)
	}
	last := ctrdLastTick(d.t, d.logPath(id))
	time.Sleep(300 * time.Millisecond)
	if now := ctrdLastTick(d.t, d.logPath(id)); now != last {
		d.t.Fatalf("%s ticked %d→%d while paused", id, last, now)
	}
}

// testPauseRefused: the fake driver refuses the suspend; `ctr task pause`
// fails naming the step, and the task runs on, not frozen.
func testPauseRefused(d *daemon) {
	d.runApp("pr")
	fault := filepath.Join(d.faults, "lock")
	if err := os.WriteFile(fault, []byte("error 2\n"), 0o644); err != nil {
		d.t.Fatal(err)
	}
	out, err := d.ctrErr("task", "pause", "pr")
	os.Remove(fault)
	if err == nil || !strings.Contains(out, "pause of pr failed at step suspend") || !strings.Contains(out, "remedy") {
		d.t.Fatalf("pause with a refused suspend: err=%v, want a failure naming the suspend step and a remedy:\n%s", err, out)
	}
	d.assertRunsOn("pr")
	d.remove("pr")
}
