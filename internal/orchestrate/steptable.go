package orchestrate

import (
	"context"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// CheckpointSteps names, in order, the steps that a checkpoint of a bare
// process takes, read from the checkpoint's own table with its skips
// applied to such a run (cuda: it has a CUDA process; leaveRunning: the
// flag), and "final" for the last write of the manifest: the names a
// failpoint holds before (CRYO_TEST_HOLD). Tests sweep them, so that a
// step added to the table is swept without editing the test.
func CheckpointSteps(cuda, leaveRunning bool) []StepName {
	c := &checkpoint{suspension: suspension{t: Target{DumpLeavesStopped: !leaveRunning}, m: manifest.New("steps")}, leaveRunning: leaveRunning}
	if cuda {
		c.toSuspend = []int{0}
		c.m.Processes = []manifest.Process{{PID: 0}}
	}
	return failpointNames(c.table())
}

// PausedCheckpointSteps names, in order, the steps that the containerd
// shim's checkpoint of a container with a CUDA process takes: containerd
// pauses a task before it asks for its checkpoint, and the shim's pause
// suspends CUDA, then freezes the task (the GPU-free pause). The
// checkpoint thaws it, finds CUDA suspended by that pause, and dumps it
// as it is: it neither suspends nor resumes CUDA itself.
func PausedCheckpointSteps(leaveRunning bool) []StepName {
	c := &checkpoint{suspension: suspension{t: Target{Thaw: func(context.Context) error { return nil }}, m: manifest.New("steps")}, leaveRunning: leaveRunning}
	c.m.Processes = []manifest.Process{{PID: 0}}
	return failpointNames(c.table())
}

// RestoreSteps names, in order, the steps that a restore of a checkpoint
// directory takes, read from CheckRestore's and Restore's own tables with
// their skips applied to a checkpoint that was completed and restores
// outside the host's network, into a container (with a spec to confine it
// to) or as a bare tree: the names a failpoint holds a restore before
// ("restore/STEP").
func RestoreSteps(container bool) []StepName {
	scope := GPUScope{}
	if container {
		scope.Spec = &specs.Spec{}
	}
	check := &restoreCheck{id: "steps", scope: scope, ports: &portsWait{id: "steps"}}
	return failpointNames(append(check.table(), (&restore{}).table()...))
}

// PauseSteps names, in order, the steps that a GPU-free pause of a
// container with a CUDA process and no hooks takes, read from the pause's
// own table: the names a failpoint holds a pause before ("pause/STEP").
func PauseSteps() []StepName {
	p := &pause{suspension: suspension{m: manifest.New("steps"), toSuspend: []int{0}}}
	return failpointNames(p.table())
}

// ResumeSteps names the two steps of a resume after a GPU-free pause
// ("resume/STEP"): the thaw, then the CUDA resume.
func ResumeSteps() []StepName { return []StepName{StepThaw, StepResume} }

// failpointNames are the failpoint names of a table, its skips applied.
func failpointNames(table []step) []StepName {
	var names []StepName
	for _, s := range table {
		if s.skip == nil || !s.skip() {
			names = append(names, s.failpointName())
		}
	}
	return names
}
