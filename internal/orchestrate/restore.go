package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// hostCheck matches a checkpoint's GPUs to this host's: the driver's
// inventory, and the explicit GPU map.
type hostCheck struct {
	driver *cuda.Driver
	log    *slog.Logger
	pairs  []cuda.GPUPair // WithGPUMap's; nil: spec
	spec   string         // the configured map ($CRYO_GPU_MAP)
}

// check matches the manifest's processes to the GPUs of scope on this
// host. A deferred scope is only checked for the driver here; its pairs are
// found after the restore (see ResumeRestored).
func (h hostCheck) check(ctx context.Context, m *manifest.Manifest, scope GPUScope) (map[int][]cuda.GPUPair, error) {
	if len(m.Needs) == 0 {
		if m.HasCUDA() {
			// manifest.Read refuses such a manifest; a caller that built
			// one must not get a restore with no host check at all.
			return nil, fmt.Errorf("the manifest lists CUDA processes but no GPU needs: %w", manifest.ErrManifestInconsistent)
		}
		return nil, nil
	}
	host, err := h.driver.Inventory(ctx)
	if err != nil {
		host = cuda.Inventory{} // no driver, no NVML: the host offers no GPU
		h.log.Warn("GPU inventory unavailable on this host", "error", err)
	}
	if scope.Deferred {
		scope = GPUScope{}
	}
	targets, err := scope.Targets(host)
	if err != nil {
		return nil, err
	}
	user, err := h.userMap()
	if err != nil {
		return nil, err
	}
	return manifest.CheckHost(m, host, targets, user)
}

func restoreRemedy(err error, dir string) string {
	switch {
	case errors.Is(err, manifest.ErrNotCheckpoint):
		return "pass the directory that `cryo checkpoint --dir` wrote (it holds inventory.img and " + manifest.ManifestName + ")"
	case errors.Is(err, manifest.ErrNoManifest):
		return "re-take the checkpoint through cryo (cryo-runc, the cryo shim, or `cryo checkpoint`), which suspends CUDA first and writes the manifest"
	case errors.Is(err, cuda.ErrNoMatchingGPU) && strings.Contains(err.Error(), "the GPU map"):
		return gpuMapRemedy(err)
	case errors.Is(err, manifest.ErrIncompatibleHost):
		return "restore on a host with the GPUs and driver above, or free GPU memory"
	case errors.Is(err, manifest.ErrCorrupt), errors.Is(err, manifest.ErrUnsupportedVersion), errors.Is(err, manifest.ErrPartial):
		return "" // their messages carry the remedy
	}
	return "check that " + dir + " is readable"
}

// gpuMapRemedy answers a GPU map that the matcher refused: the host is
// not at fault, the map is (internal/cuda's matcher names the map in its message).
func gpuMapRemedy(err error) string {
	if strings.Contains(err.Error(), "will not see") {
		return "that GPU is not one the process can see after the restore (its CUDA_VISIBLE_DEVICES picks among this host's GPUs): map the GPU onto one that it sees (`cryo inspect` shows its CUDA_VISIBLE_DEVICES, `nvidia-smi -L` the host's UUIDs), or leave that pair out of --gpu-map ($CRYO_GPU_MAP) and cryo picks one"
	}
	return "correct --gpu-map ($CRYO_GPU_MAP): map each GPU the checkpoint used (`cryo inspect` lists them) onto a GPU of the same model that this host has (`nvidia-smi -L`), each at most once"
}

// resumeError is a failed CUDA resume after a restore: the processes are
// held stopped, suspended, and the user can retry the resume. The outcome
// says what they are now, checked, not what they should be.
func resumeError(ctx context.Context, t Target, err error) error {
	outcome := "the restored processes are held stopped, with CUDA still suspended"
	if pids, perr := t.PIDs(ctx); perr == nil {
		outcome = "after the restore, " + procsNow(pids)
	}
	return &report.StepError{Op: "restore", ID: t.ID, Step: StepResume, Err: err,
		Outcome: outcome,
		Remedy:  "run `cryo recover PID` (see `cryo cuda state PID`), or kill them and restore again"}
}
