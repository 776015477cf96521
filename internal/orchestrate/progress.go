package orchestrate

import (
	"context"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/progress"
)

// WithProgress draws the long steps of a checkpoint or restore on r: the
// CUDA suspend and resume (the GPU memory they move and the time elapsed,
// with an ETA only from a rate measured before), the CRIU dump (the pages
// written of an estimate from the tree's memory), the hashing and the
// verification (bytes hashed of the total), the CRIU restore and the waits.
// A front end that passes it needs neither WithEvents nor WithCUDAProgress
// for its terminal, and the steps are not logged a second time. Without it
// (the shim, which has no terminal) nothing is drawn.
func WithProgress(r *progress.Renderer) Option { return func(o *Orchestrator) { o.Progress = r } }

// stepLabels are the steps that get a progress line, as a user reads them.
var stepLabels = map[StepName]string{
	StepSuspend:  "suspending CUDA",
	StepDump:     "dumping with CRIU",
	StepResume:   "resuming CUDA",
	StepDigests:  "hashing image files",
	StepRollback: "rolling back: resuming CUDA",
	StepVerify:   "verifying checkpoint",
	StepComplete: "completing a checkpoint interrupted after its dump",
	StepRestore:  "restoring with CRIU",
	StepPorts:    "waiting for the listening ports to leave TIME_WAIT",
	StepPreHook:  "running the pre-checkpoint hook",
	StepPostHook: "running the post-restore hook",
}

// opaqueSteps report nothing while they run: their lines show the time
// elapsed (and the bytes they move, when known), not bytes done.
var opaqueSteps = map[StepName]bool{
	StepSuspend: true, StepResume: true, StepRollback: true,
	StepComplete: true, StepRestore: true, StepPorts: true,
	StepPreHook: true, StepPostHook: true,
}

// startTask begins the line of step s of id, or returns nil when s has none
// or nothing is drawn.
func (st stepper) startTask(id string, s StepName) *progress.Task {
	label, ok := stepLabels[s]
	if !ok || st.progress == nil {
		return nil
	}
	if opaqueSteps[s] {
		return st.progress.StartOpaque(id+": "+label, 0)
	}
	return st.progress.Start(id+": "+label, 0)
}

type taskKey struct{}

// withTask hands a step's line to the step's function.
func withTask(ctx context.Context, t *progress.Task) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, taskKey{}, t)
}

// taskFrom is the line of the step running under ctx; nil (which draws
// nothing) when there is none.
func taskFrom(ctx context.Context) *progress.Task {
	t, _ := ctx.Value(taskKey{}).(*progress.Task)
	return t
}

// endErr is how a step ended for its line: one that failed because ctx was
// canceled was interrupted, whatever error it returned.
func endErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// gpuBytes is the GPU memory that pids held at the inventory: what their
// suspend copies to host memory and their resume copies back.
func gpuBytes(m *manifest.Manifest, pids []int) int64 {
	want := map[int]bool{}
	for _, p := range pids {
		want[p] = true
	}
	var n int64
	for _, p := range m.Processes {
		if want[p.PID] {
			n += int64(p.GPUMemory)
		}
	}
	return n
}

// measuredRate is bytes over d, or 0 when either is unknown.
func measuredRate(bytes int64, d time.Duration) float64 {
	if bytes <= 0 || d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds()
}

// recordedCopyRate is the rate of the checkpoint's own suspend, from its
// manifest: the best guess for the resume of its restore, which copies the
// same memory back.
func recordedCopyRate(m *manifest.Manifest) float64 {
	for _, s := range m.Steps {
		if s.Name == string(StepSuspend) && s.Error == "" {
			return measuredRate(allGPUBytes(m), time.Duration(s.Seconds*float64(time.Second)))
		}
	}
	return 0
}

// allGPUBytes is the GPU memory of every CUDA process of the checkpoint.
func allGPUBytes(m *manifest.Manifest) int64 {
	var n int64
	for _, p := range m.Processes {
		n += int64(p.GPUMemory)
	}
	return n
}

// CUDASuspend suspends pids through d as d.Suspend does, with one line on
// r for the whole set (the driver copies the processes in parallel): the
// GPU memory they hold, from the driver's inventory, and the time elapsed.
// For `cryo cuda suspend`; a nil r draws nothing.
func CUDASuspend(ctx context.Context, d *cuda.Driver, pids []int, opts cuda.SetOptions, r *progress.Renderer) error {
	t := r.StartOpaque(pidsLabel(pids)+": suspending CUDA", 0)
	if r != nil {
		t.SetTotal(inventoryBytes(ctx, d, pids))
	}
	err := d.Suspend(ctx, pids, opts)
	t.End(endErr(ctx, err))
	return err
}

// CUDAResume resumes pids through d as d.Resume does, with one line on r
// showing the time elapsed (what a suspended process holds on the GPU is
// not known until it is back). For `cryo cuda resume`.
func CUDAResume(ctx context.Context, d *cuda.Driver, pids []int, opts cuda.SetOptions, r *progress.Renderer) error {
	t := r.StartOpaque(pidsLabel(pids)+": resuming CUDA", 0)
	err := d.Resume(ctx, pids, opts)
	t.End(endErr(ctx, err))
	return err
}

// pidsLabel names the processes of a line: "pid 4242", "pids 4242 4243".
func pidsLabel(pids []int) string {
	if len(pids) == 1 {
		return "pid " + pidList(pids)
	}
	return "pids " + pidList(pids)
}

// inventoryBytes is the GPU memory pids hold now, 0 when the inventory is
// unavailable (the line then shows the time alone).
func inventoryBytes(ctx context.Context, d *cuda.Driver, pids []int) int64 {
	inv, err := d.Inventory(ctx)
	if err != nil {
		return 0
	}
	var n int64
	for _, p := range pids {
		v, err := inv.Describe(p)
		if err != nil {
			continue
		}
		for _, g := range v.GPUs {
			n += int64(g.Memory)
		}
	}
	return n
}
