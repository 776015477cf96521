package cuda

import (
	"strconv"
)

// ProcessGPUs is what cryo learns about the GPUs of one CUDA process while
// it still runs: the GPUs it can see (the driver restores a process only by
// a one-to-one map over exactly those), the memory it holds on each (what a
// restore needs free), and whether it is an NCCL rank.
type ProcessGPUs struct {
	PID   int `json:"pid"`
	NSPID int `json:"nspid"` // its pid inside its container; the same after a restore
	// GPUs it can see, in CUDA's order (NVML index order).
	GPUs []ProcessGPU `json:"gpus"`
	// Evidence says how GPUs was found: "device files" (the /dev/nvidiaN it
	// held open) or "environment" (it held none, e.g. already suspended:
	// the GPU nodes it can open, narrowed by CUDA_VISIBLE_DEVICES).
	Evidence       string         `json:"evidence"`
	VisibleDevices VisibleDevices `json:"cuda_visible_devices"`
	NCCL           *NCCLRank      `json:"nccl,omitempty"`
	XLA            *XLAProcess    `json:"xla,omitempty"`
}

// ProcessGPU is one GPU a process can see.
type ProcessGPU struct {
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	ComputeCapability string `json:"compute_capability"`
	Memory            uint64 `json:"memory"` // bytes the process held on it
}

// Evidence values of ProcessGPUs.
const (
	EvidenceFiles = "device files"
	EvidenceEnv   = "environment"
)

// Describe learns which GPUs pid can see and what it holds on each, from
// the inventory inv (taken by Inventory just before) and /proc.
func (inv Inventory) Describe(pid int) (ProcessGPUs, error) {
	env, err := processEnv(pid)
	if err != nil {
		return ProcessGPUs{}, err
	}
	p := ProcessGPUs{PID: pid, NSPID: nsPID(pid), VisibleDevices: visibleDevices(env)}
	if p.NCCL, err = ncclRank(pid, env); err != nil {
		return p, err
	}
	if p.XLA, err = xlaOf(pid, env); err != nil {
		return p, err
	}
	held, err := heldMinors(pid)
	if err != nil {
		return p, err
	}
	gpus, known := inv.byMinor(held)
	if len(held) > 0 && known {
		p.Evidence = EvidenceFiles
	} else {
		p.Evidence = EvidenceEnv
		if gpus, err = p.VisibleDevices.Select(inv.AccessibleTo(pid)); err != nil {
			return p, err
		}
	}
	for _, g := range gpus {
		p.GPUs = append(p.GPUs, ProcessGPU{UUID: g.UUID, Name: g.Name, ComputeCapability: g.ComputeCapability, Memory: g.held(pid)})
	}
	return p, nil
}

// byMinor returns the GPUs with the given minors, in inventory order;
// known is false if some minor matches no GPU (NVML gave no minors).
func (inv Inventory) byMinor(minors []int) (gpus []GPU, known bool) {
	want := map[int]bool{}
	for _, m := range minors {
		want[m] = true
	}
	for _, g := range inv.GPUs {
		if want[g.Minor] {
			gpus = append(gpus, g)
		}
	}
	return gpus, len(gpus) == len(minors)
}

// Accessible returns the GPUs whose device nodes exist under root's /dev
// (a process's /proc/PID/root), in inventory order; all GPUs when root has
// no GPU node at all (a host without device isolation, or a driver
// that creates its nodes on first use).
func (inv Inventory) Accessible(root string) []GPU {
	minors := nodeMinors(root)
	if len(minors) == 0 {
		return inv.GPUs
	}
	gpus, _ := inv.byMinor(minors)
	return gpus
}

// AccessibleTo is Accessible for the root of process pid: the GPUs whose
// nodes it can open (its container's /dev, or the host's).
func (inv Inventory) AccessibleTo(pid int) []GPU {
	return inv.Accessible("/proc/" + strconv.Itoa(pid) + "/root")
}

// ByMinors returns the inventory's GPUs for the given minors, in inventory
// order, and the minors that match no GPU.
func (inv Inventory) ByMinors(minors []int) (gpus []GPU, unknown []int) {
	have := map[int]bool{}
	for _, g := range inv.GPUs {
		have[g.Minor] = true
	}
	for _, m := range minors {
		if !have[m] {
			unknown = append(unknown, m)
		}
	}
	gpus, _ = inv.byMinor(minors)
	return gpus, unknown
}

// held is the memory pid holds on g, by NVML.
func (g GPU) held(pid int) uint64 {
	for _, p := range g.Processes {
		if p.PID == pid {
			return p.Memory
		}
	}
	return 0
}
