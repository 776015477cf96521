package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrXLAMultiGPU: a JAX (XLA) process that computes on several GPUs,
// which driver 580 does not restore reliably, whatever XLA's allocator.
//
// Measured on 2x H100 (driver 580.159.04, JAX 0.11.2 with the CUDA 13
// plugin, 2026-11-26): with XLA's default allocator (BFC) every restore
// fails; cuCheckpointProcessRestore answers CUDA_ERROR_INVALID_VALUE, with
// or without a GPU map and with every thread held as CRIU's CUDA plugin
// holds them. With XLA_PYTHON_CLIENT_ALLOCATOR=platform, 4 restores of 17
// failed the same way, each from a checkpoint that looked like the others
// (the same GPUs, the same memory). A failed restore is final: a second
// driver call answers CUDA_ERROR_OPERATING_SYSTEM, and restoring the same
// checkpoint again fails again, so the checkpoint itself is lost. With one
// GPU visible, the same process is restored every time.
var ErrXLAMultiGPU = errors.New("JAX (XLA) on several GPUs")

// XLAProcess marks a process that runs XLA's CUDA backend (JAX).
type XLAProcess struct {
	// Allocator is XLA_PYTHON_CLIENT_ALLOCATOR as the process started
	// ("" for XLA's default, its BFC allocator).
	Allocator string `json:"allocator,omitempty"`
}

// xlaMarks are what a process running XLA's CUDA backend maps: JAX's CUDA
// plugin (jax_plugins/xla_cuda12, xla_cuda13) or jaxlib's own CUDA kernels.
var xlaMarks = [][]byte{[]byte("/jax_plugins/xla_cuda"), []byte("xla_cuda_plugin.so"), []byte("/jaxlib/cuda/")}

// xlaOf returns nil unless pid maps XLA's CUDA backend.
func xlaOf(pid int, env map[string]string) (*XLAProcess, error) {
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return nil, noProcess(pid, err)
	}
	for _, m := range xlaMarks {
		if bytes.Contains(maps, m) {
			return &XLAProcess{Allocator: env["XLA_PYTHON_CLIENT_ALLOCATOR"]}, nil
		}
	}
	return nil, nil
}

// restorable: an XLA process is restored reliably on one GPU only. The
// allocator does not save it (ErrXLAMultiGPU); it is kept in the manifest
// and in the refusal because it says how often the restore would fail.
func (x *XLAProcess) restorable(gpus int) bool {
	return x == nil || gpus < 2
}

// CheckXLA refuses, before anything is suspended, an XLA process that uses
// several GPUs: the suspend would succeed, and the restore could fail for
// good, losing the process and its checkpoint.
func CheckXLA(procs []ProcessGPUs) error {
	var risky []string
	for _, p := range procs {
		if n := p.usedGPUs(); !p.XLA.restorable(n) {
			risky = append(risky, fmt.Sprintf("%d (%d GPUs%s)", p.PID, n, p.XLA.allocatorNote()))
		}
	}
	return xlaRefusal(risky)
}

// allocatorNote names the allocator in a refusal.
func (x *XLAProcess) allocatorNote() string {
	if x.Allocator == "" {
		return ", XLA's default allocator"
	}
	return ", allocator " + x.Allocator
}

// CheckXLAOf is CheckXLA for processes not yet described (cryo cuda
// suspend): the GPUs are those whose device files the process holds.
func CheckXLAOf(pids []int) error {
	var risky []string
	for _, pid := range unique(pids) {
		env, err := processEnv(pid)
		if err != nil {
			return err
		}
		x, err := xlaOf(pid, env)
		if err != nil || x == nil {
			continue
		}
		held, err := heldMinors(pid)
		if err != nil {
			return err
		}
		if n := visibleCap(env, len(held)); !x.restorable(n) {
			risky = append(risky, fmt.Sprintf("%d (%d GPUs%s)", pid, n, x.allocatorNote()))
		}
	}
	return xlaRefusal(risky)
}

// usedGPUs is how many GPUs p computes on: those it holds memory on where
// NVML said (XLA preallocates on every GPU it uses), else those it can
// see. The device files alone overcount: the driver opens every GPU's
// node at start-up, CUDA_VISIBLE_DEVICES=0 or not (measured on 580).
func (p ProcessGPUs) usedGPUs() int {
	n := 0
	for _, g := range p.GPUs {
		if g.Memory > 0 {
			n++
		}
	}
	if n > 0 {
		return n
	}
	env := map[string]string{}
	if p.VisibleDevices.Set {
		env["CUDA_VISIBLE_DEVICES"] = p.VisibleDevices.Value
	}
	return visibleCap(env, len(p.GPUs))
}

// visibleCap caps n, the GPUs whose device files a process holds, by
// the entries of its CUDA_VISIBLE_DEVICES when set: a process never
// computes on more GPUs than that lists.
func visibleCap(env map[string]string, n int) int {
	v, ok := env["CUDA_VISIBLE_DEVICES"]
	if !ok {
		return n
	}
	listed := 0
	for _, tok := range strings.Split(v, ",") {
		if strings.TrimSpace(tok) != "" {
			listed++
		}
	}
	return min(n, listed)
}

func xlaRefusal(risky []string) error {
	if len(risky) == 0 {
		return nil
	}
	return report.WithRemedy(fmt.Errorf("%w: pid %s: a JAX (XLA) process that computes on several GPUs, which driver 580 does not restore reliably (with XLA's default allocator never, with XLA_PYTHON_CLIENT_ALLOCATOR=platform about one restore in four; a failed restore leaves the process suspended for good and its checkpoint unusable); nothing was suspended",
		ErrXLAMultiGPU, strings.Join(risky, ", ")),
		"give each process one GPU (CUDA_VISIBLE_DEVICES=N, one process per GPU); --allow-cuda-ipc suspends it anyway, at that risk")
}
