package manifest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/report"
)

// GPUNeed is one GPU a restore needs: the same model (name and compute
// capability, since the GPU state is not portable across architectures) with
// enough free memory to take back what the processes held.
type GPUNeed struct {
	UUID              string `json:"uuid"` // the source GPU, for the remap
	Name              string `json:"name"`
	ComputeCapability string `json:"compute_capability"`
	Memory            uint64 `json:"memory"` // bytes that must be free
}

// NeedsFromProcesses derives the needs from what the processes saw and
// held: the union of their GPUs, each with the memory they held on it.
// Other tenants of the source host count for nothing.
func NeedsFromProcesses(procs []Process) []GPUNeed {
	var needs []GPUNeed
	at := map[string]int{}
	for _, p := range procs {
		for _, g := range p.GPUs {
			i, ok := at[g.UUID]
			if !ok {
				i = len(needs)
				at[g.UUID] = i
				needs = append(needs, GPUNeed{UUID: g.UUID, Name: g.Name, ComputeCapability: g.ComputeCapability})
			}
			needs[i].Memory += g.Memory
		}
	}
	return needs
}

// CheckHost refuses, before anything is restored, a host that cannot take
// the checkpoint m, saying what is missing; otherwise it returns, per
// process (by NSPID), the GPU pairs for the driver's restore. targets are
// the GPUs the restored processes can open (a container's, or the host's),
// user a partial GPU map to honour. A checkpoint without CUDA processes fits
// every host.
func CheckHost(m *Manifest, host cuda.Inventory, targets []cuda.GPU, user []cuda.GPUPair) (map[int][]cuda.GPUPair, error) {
	if !m.HasCUDA() || len(m.Needs) == 0 {
		return nil, nil
	}
	if err := checkDriver(m.Inventory, host); err != nil {
		return nil, err
	}
	if !m.PerProcess() {
		return legacyPairs(m, targets, user)
	}
	var places []cuda.Placement
	for _, p := range m.Processes {
		pl := cuda.Placement{Key: p.NSPID, GPUs: p.GPUs}
		if p.VisibleDevices != nil {
			pl.VisibleDevices = *p.VisibleDevices
		}
		places = append(places, pl)
	}
	pairs, err := cuda.Match(places, targets, user)
	if err != nil {
		return nil, &HostError{Detail: err.Error(), Err: err}
	}
	return pairs, nil
}

// legacyPairs serves manifests before version 3, which do not say which
// GPUs each process saw. Where every GPU they name is among the targets,
// the driver restores the processes where they were, with no pairs (a
// full map could name GPUs a process does not see, which the driver
// refuses); otherwise the needed GPUs are matched as if one process had
// seen them all, and the pairs go to every process, which is right when
// the source host had only the GPUs the processes saw.
func legacyPairs(m *Manifest, targets []cuda.GPU, user []cuda.GPUPair) (map[int][]cuda.GPUPair, error) {
	if len(user) == 0 && allPresent(m.Needs, targets) {
		return nil, nil
	}
	all := cuda.Placement{Key: AnyProcess, Unrecorded: true}
	for _, n := range m.Needs {
		all.GPUs = append(all.GPUs, cuda.ProcessGPU{UUID: n.UUID, Name: n.Name, ComputeCapability: n.ComputeCapability, Memory: n.Memory})
	}
	pairs, err := cuda.Match([]cuda.Placement{all}, targets, user)
	if err != nil {
		return nil, &HostError{Detail: err.Error(), Err: err}
	}
	return pairs, nil
}

func allPresent(needs []GPUNeed, gpus []cuda.GPU) bool {
	for _, n := range needs {
		found := false
		for _, g := range gpus {
			found = found || g.UUID == n.UUID
		}
		if !found {
			return false
		}
	}
	return true
}

// checkDriver refuses a host whose driver is older than the source's: the
// restoring driver must understand the saved state.
func checkDriver(src, host cuda.Inventory) error {
	if src.DriverVersion == "" {
		return nil
	}
	if host.DriverVersion == "" {
		// No GPU is listed for a host without a driver: a remedy pointing
		// at "the GPUs above" would point at nothing.
		return report.WithRemedy(&HostError{Detail: fmt.Sprintf("restore needs NVIDIA driver ≥ %s; this host has no NVIDIA driver (NVML found no driver)", src.DriverVersion)},
			fmt.Sprintf("install the NVIDIA driver (%s or later) and load it (nvidia-smi lists the GPUs then), or restore on a host that has it", src.DriverVersion))
	}
	if compareVersions(host.DriverVersion, src.DriverVersion) < 0 {
		return report.WithRemedy(&HostError{Detail: fmt.Sprintf("restore needs NVIDIA driver ≥ %s (CUDA %s); this host has driver %s (CUDA %s)",
			src.DriverVersion, cudaVersion(src.CUDAVersion), host.DriverVersion, cudaVersion(host.CUDAVersion))},
			"upgrade the driver or restore on another host")
	}
	return nil
}

// cudaVersion turns 13000 into "13.0".
func cudaVersion(v int) string {
	if v == 0 {
		return "?"
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// compareVersions compares dotted numeric versions ("580.159.04").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		x, y := part(as, i), part(bs, i)
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func part(p []string, i int) int {
	if i >= len(p) {
		return 0
	}
	n, _ := strconv.Atoi(p[i])
	return n
}
