package containerd

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// testTaskPauseResume: `ctr task pause` suspends CUDA (the fake driver
// reports the process checkpointed, its device memory given up) and then
// freezes the task; `ctr task resume` thaws it and brings CUDA back with
// its device memory intact (every tick checks it). A checkpoint of the
// paused task dumps it as it is, records the GPU memory it held, leaves it
// paused, and restores.
func testTaskPauseResume(d *harness.Daemon) {
	d.RunApp("pz")
	pid := d.TaskPid("pz")
	d.PauseAndCheck("pz", pid)
	// containerd refuses to delete a paused task; the pause record stays,
	// so the resume still brings CUDA back.
	if out, err := d.CtrErr("task", "delete", "pz"); err == nil {
		d.T.Fatalf("ctr task delete of a paused task succeeded:\n%s", out)
	}
	d.Ctr("task", "resume", "pz")
	d.AssertRunsOn("pz")
	if p, err := fakecuda.ReadPage(pid); err != nil || p.State != 0 || p.Restores != 1 {
		d.T.Fatalf("CUDA after a refused delete and ctr task resume: %+v (%v), want running after one restore", p, err)
	}

	d.PauseAndCheck("pz", pid)
	ref, before := d.TaskCheckpoint("pz")
	// containerd leaves a task that was paused before its checkpoint
	// paused: CUDA stays suspended until the user's resume.
	if st := d.TaskStatus("pz"); st != client.Paused {
		d.T.Fatalf("paused task after its checkpoint: %s, want still paused", st)
	}
	if p, err := fakecuda.ReadPage(pid); err != nil || p.State != 2 {
		d.T.Fatalf("CUDA of the paused task after its checkpoint: %+v (%v), want checkpointed", p, err)
	}
	d.Ctr("task", "resume", "pz")
	d.AssertRunsOn("pz")
	m := d.CheckpointManifest(ref)
	if len(m.Processes) != 1 || !m.Processes[0].Paused || m.Processes[0].GPUMemory == 0 {
		d.T.Fatalf("manifest of the paused task: %+v, want its one CUDA process, paused, with the GPU memory it held", m.Processes)
	}
	d.RestoreTask(ref, "pz-clone")
	d.WaitTicks("pz-clone", 3)
	harness.AssertContinues(d.T, d.LogPath("pz-clone"), before)
	d.Remove("pz-clone")
	d.Remove("pz")
}

// testPauseRefused: the fake driver refuses the suspend; `ctr task pause`
// fails naming the step, and the task runs on, not frozen.
func testPauseRefused(d *harness.Daemon) {
	d.RunApp("pr")
	fault := filepath.Join(d.Faults, "lock")
	if err := os.WriteFile(fault, []byte("error 2\n"), 0o644); err != nil {
		d.T.Fatal(err)
	}
	out, err := d.CtrErr("task", "pause", "pr")
	os.Remove(fault)
	if err == nil || !strings.Contains(out, "pause of pr failed at step suspend") || !strings.Contains(out, "remedy") {
		d.T.Fatalf("pause with a refused suspend: err=%v, want a failure naming the suspend step and a remedy:\n%s", err, out)
	}
	d.AssertRunsOn("pr")
	d.Remove("pr")
}
