package cuda

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrUnsupportedGPU: the process uses a GPU setup the driver's checkpoint
// API cannot restore (MIG instances).
var ErrUnsupportedGPU = errors.New("GPU setup not supported by the driver's checkpoint API")

// VisibleDevices is a process's CUDA_VISIBLE_DEVICES.
type VisibleDevices struct {
	Set   bool   `json:"set"`
	Value string `json:"value,omitempty"`
}

func (v VisibleDevices) String() string {
	if !v.Set {
		return "CUDA_VISIBLE_DEVICES unset"
	}
	return "CUDA_VISIBLE_DEVICES=" + v.Value
}

// Select applies CUDA_VISIBLE_DEVICES to gpus, the GPUs a process can open
// in CUDA's order, as CUDA does at start-up: unset means all; otherwise a
// comma-separated list of indices into gpus or GPU UUIDs (or unique
// prefixes of them), which ends at the first entry that names no GPU or
// names one again. The driver re-applies it at a restore, which is why a
// remap has to respect it (measured on 580: a process started with
// CUDA_VISIBLE_DEVICES=0 on a 2-GPU host cannot be restored onto GPU 1).
func (v VisibleDevices) Select(gpus []GPU) ([]GPU, error) {
	if !v.Set {
		return gpus, nil
	}
	var out []GPU
	taken := map[string]bool{}
	for _, tok := range strings.Split(v.Value, ",") {
		tok = strings.TrimSpace(tok)
		if strings.HasPrefix(tok, "MIG-") {
			return nil, fmt.Errorf("%w: %s names a MIG instance; the driver cannot checkpoint MIG", ErrUnsupportedGPU, v)
		}
		g, ok := pickVisible(tok, gpus)
		if !ok || taken[g.UUID] {
			break
		}
		taken[g.UUID] = true
		out = append(out, g)
	}
	return out, nil
}

func pickVisible(tok string, gpus []GPU) (GPU, bool) {
	if i, err := strconv.Atoi(tok); err == nil {
		if i >= 0 && i < len(gpus) {
			return gpus[i], true
		}
		return GPU{}, false
	}
	if !strings.HasPrefix(tok, "GPU-") || len(tok) < 5 {
		return GPU{}, false
	}
	var found []GPU
	for _, g := range gpus {
		if strings.HasPrefix(g.UUID, tok) {
			found = append(found, g)
		}
	}
	if len(found) != 1 {
		return GPU{}, false
	}
	return found[0], true
}

// processEnv reads the environment pid started with. Variables a process
// sets for itself later (Python's os.environ) are not there.
func processEnv(pid int) (map[string]string, error) {
	env, err := procfs.Environ(pid)
	if err != nil {
		return nil, noProcess(pid, err)
	}
	return env, nil
}

func visibleDevices(env map[string]string) VisibleDevices {
	v, ok := env["CUDA_VISIBLE_DEVICES"]
	return VisibleDevices{Set: ok, Value: v}
}

// nsPID returns pid's number in its innermost pid namespace: a container
// restores its processes with those numbers, so they identify a process
// across a restore (its host pid changes).
func nsPID(pid int) int { return procfs.NSPID(pid) }

// NSPID is nsPID for callers outside the package (the restore matches its
// processes to the manifest's by it).
func NSPID(pid int) int { return nsPID(pid) }

// CheckVisible refuses, before anything is suspended, a process that no
// restore could give back: one that holds the device files of more GPUs
// than its CUDA_VISIBLE_DEVICES selects. PyTorch and JAX started with
// CUDA_VISIBLE_DEVICES=0 on 2x H100 held both GPUs' device files (driver
// 580), so the checkpoint recorded both, while a restore counts the GPUs
// the variable selects and refused the difference (ErrNoMatchingGPU): the
// checkpoint was taken, and the process lost with it.
func CheckVisible(procs []ProcessGPUs, inv Inventory) error {
	if len(inv.GPUs) == 0 {
		return nil // no inventory: nothing to count against (the restore cannot check either)
	}
	var bad []string
	for _, p := range procs {
		if !p.VisibleDevices.Set || p.Evidence != EvidenceFiles {
			continue
		}
		sees, err := p.VisibleDevices.Select(inv.AccessibleTo(p.PID))
		if err != nil {
			return err
		}
		if len(sees) != len(p.GPUs) {
			bad = append(bad, fmt.Sprintf("pid %d holds the device files of %d GPUs, and its %s selects %d", p.PID, len(p.GPUs), p.VisibleDevices, len(sees)))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return report.WithRemedy(fmt.Errorf("%w: %s: the driver restores a process only onto as many GPUs as it had, and the restore would give it as many as the variable selects, so the checkpoint could never be restored; nothing was suspended",
		ErrNoMatchingGPU, strings.Join(bad, "; ")),
		"run the process in a container given only the GPUs it uses (one device file each), or without CUDA_VISIBLE_DEVICES")
}
