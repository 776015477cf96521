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

// ErrXLAMultiGPU: a JAX (XLA) process that can open several GPUs, which
// driver 580 does not restore reliably, whatever XLA's allocator and
// whatever CUDA_VISIBLE_DEVICES says.
//
// Measured on 2x H100 (driver 580.159.04, JAX 0.11.2 with the CUDA 13
// plugin, 2026-11-26): with XLA's default allocator (BFC) every restore
// fails; cuCheckpointProcessRestore answers CUDA_ERROR_INVALID_VALUE, with
// or without a GPU map and with every thread held as CRIU's CUDA plugin
// holds them. With XLA_PYTHON_CLIENT_ALLOCATOR=platform, 4 restores of 17
// failed the same way, each from a checkpoint that looked like the others
// (the same GPUs, the same memory). With CUDA_VISIBLE_DEVICES=0 on that
// host, 7 of 7 restores failed the same way, CRIU's zero-page patch on or
// off: the driver opens every GPU's device file whatever
// CUDA_VISIBLE_DEVICES says. A failed restore is final: a second driver
// call answers CUDA_ERROR_OPERATING_SYSTEM, and restoring the same
// checkpoint again fails again, so the checkpoint itself is lost. In a
// container given one GPU (one device file), the same process is restored
// every time.
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

// restorable: an XLA process is restored reliably where it can open one
// GPU only. Neither the allocator nor CUDA_VISIBLE_DEVICES saves it
// (ErrXLAMultiGPU); both are named in the refusal because they say how the
// restore would fail.
func (x *XLAProcess) restorable(gpus int) bool {
	return x == nil || gpus < 2
}

// CheckXLA refuses, before anything is suspended, an XLA process that can
// open several GPUs: the suspend would succeed, and the restore could fail
// for good, losing the process and its checkpoint. It counts the GPUs
// whose device files the process holds, or the GPUs its environment
// selects where it holds none (p.GPUs), and also every GPU whose node it
// can open (inv): JAX started with CUDA_VISIBLE_DEVICES=0 on 2x H100
// held both nodes, and after one in-place suspend and resume only GPU
// 0's, yet the driver failed every restore of its checkpoint (3 of 3,
// CUDA_ERROR_INVALID_VALUE, driver 580). Without an inventory only p.GPUs
// counts.
func CheckXLA(procs []ProcessGPUs, inv Inventory) error {
	var risky []string
	for _, p := range procs {
		if p.XLA == nil {
			continue
		}
		if n := max(len(p.GPUs), inv.openable(p.PID)); !p.XLA.restorable(n) {
			risky = append(risky, fmt.Sprintf("%d (%d GPUs%s%s)", p.PID, n, p.XLA.allocatorNote(), visibleNote(p.VisibleDevices)))
		}
	}
	return xlaRefusal(risky)
}

// openable counts the inventory's GPUs whose device nodes pid can open
// (under its root: a container given one GPU has one); 0 without an
// inventory.
func (inv Inventory) openable(pid int) int {
	if len(inv.GPUs) == 0 {
		return 0
	}
	return len(inv.AccessibleTo(pid))
}

// visibleNote names a CUDA_VISIBLE_DEVICES in a refusal.
func visibleNote(v VisibleDevices) string {
	if !v.Set {
		return ""
	}
	return ", " + v.String()
}

// allocatorNote names the allocator in a refusal.
func (x *XLAProcess) allocatorNote() string {
	if x.Allocator == "" {
		return ", XLA's default allocator"
	}
	return ", allocator " + x.Allocator
}

// CheckXLAOf is CheckXLA for `cryo cuda suspend`, in place, of processes
// not yet described: the GPUs are those whose device files the process
// holds, capped by its CUDA_VISIBLE_DEVICES.
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
		// In place (no CRIU in between) a process that CUDA_VISIBLE_DEVICES
		// keeps on one GPU is suspended and resumed every time, though the
		// driver opened every GPU's node: only the GPUs it computes on count.
		if n := visibleCap(env, len(held)); !x.restorable(n) {
			risky = append(risky, fmt.Sprintf("%d (%d GPUs%s)", pid, n, x.allocatorNote()))
		}
	}
	return xlaRefusal(risky)
}

func xlaRefusal(risky []string) error {
	if len(risky) == 0 {
		return nil
	}
	return report.WithRemedy(fmt.Errorf("%w: pid %s: a JAX (XLA) process that can open several GPUs, which driver 580 does not restore reliably (computing on several: with XLA's default allocator never, with XLA_PYTHON_CLIENT_ALLOCATOR=platform about one restore in four; on one chosen by CUDA_VISIBLE_DEVICES: never, for the driver opens every GPU it can; a failed restore leaves the process suspended for good and its checkpoint unusable); nothing was suspended",
		ErrXLAMultiGPU, strings.Join(risky, ", ")),
		"run each JAX process in a container given only its GPU (one GPU device per container; CUDA_VISIBLE_DEVICES alone is not enough); --allow-cuda-ipc suspends it anyway, at that risk")
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
