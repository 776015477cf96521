//go:build cgo

package cuda

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/cryo-gpu/cryo/internal/config"
)

// inventory reads the GPUs through NVML. It runs only in the helper, so
// that no long-lived process (the shim) ever loads the driver libraries.
func inventory(path string) reply {
	var opts []nvml.LibraryOption
	if path != "" {
		opts = append(opts, nvml.WithLibraryPath(path))
	}
	lib := nvml.New(opts...)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nvmlFail("init", ret, path)
	}
	defer lib.Shutdown()
	inv, werr := readInventory(lib)
	if werr != nil {
		return reply{Err: werr}
	}
	return reply{Inv: &inv}
}

func readInventory(lib nvml.Interface) (Inventory, *wireError) {
	var inv Inventory
	var ret nvml.Return
	if inv.DriverVersion, ret = lib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return inv, nvmlFail("driver version", ret, "").Err
	}
	if inv.CUDAVersion, ret = lib.SystemGetCudaDriverVersion(); ret != nvml.SUCCESS {
		return inv, nvmlFail("CUDA driver version", ret, "").Err
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return inv, nvmlFail("device count", ret, "").Err
	}
	inv.GPUs = []GPU{}
	for i := 0; i < n; i++ {
		g, werr := readGPU(lib, i)
		if werr != nil {
			return inv, werr
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv, nil
}

func readGPU(lib nvml.Interface, i int) (GPU, *wireError) {
	g := GPU{Index: i}
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return g, nvmlFail(fmt.Sprintf("GPU %d handle", i), ret, "").Err
	}
	if g.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return g, nvmlFail(fmt.Sprintf("GPU %d name", i), ret, "").Err
	}
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return g, nvmlFail(fmt.Sprintf("GPU %d UUID", i), ret, "").Err
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return g, nvmlFail(fmt.Sprintf("GPU %d memory", i), ret, "").Err
	}
	g.MemoryTotal, g.MemoryFree = mem.Total, mem.Free
	major, minor, ret := dev.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return g, nvmlFail(fmt.Sprintf("GPU %d compute capability", i), ret, "").Err
	}
	g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	// The minor number ties a /dev/nvidiaN that a process holds to this
	// GPU; the process list says how much memory each process holds here.
	// Neither is essential to the inventory, so a failure leaves them out.
	g.Minor = -1
	if m, ret := dev.GetMinorNumber(); ret == nvml.SUCCESS {
		g.Minor = m
	}
	if procs, ret := dev.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		for _, p := range procs {
			mem := p.UsedGpuMemory
			if mem == ^uint64(0) { // NVML_VALUE_NOT_AVAILABLE (some VMs, MIG)
				mem = 0
			}
			g.Processes = append(g.Processes, GPUProcess{PID: int(p.Pid), Memory: mem})
		}
	}
	return g, nil
}

func nvmlFail(what string, ret nvml.Return, path string) reply {
	msg := fmt.Sprintf("NVML %s: %s", what, ret.Error())
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		if path == "" {
			path = defaultLibNVML
		}
		msg = fmt.Sprintf("cannot load %s; install the NVIDIA driver, or set %s or Options.NVMLPath", path, config.EnvLibNVML)
	}
	return reply{Err: &wireError{Kind: kindNVML, Message: msg}}
}
