package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/cuda"
)

// minDriverMajor is the first driver branch with the checkpoint API that
// cryo needs; r580 adds GPU remapping on restore.
const minDriverMajor = 570

const noDriver = "no NVIDIA driver: GPU checkpoints unavailable, CPU containers work"

// checkDriver: a host without the driver library is a CPU host, and skips
// the GPU checks. A driver that is there but cannot checkpoint fails: its
// GPU containers would fail to checkpoint.
func (e *env) checkDriver(ctx context.Context) []Check {
	info, err := e.driver.Probe(ctx)
	switch {
	case errors.Is(err, cuda.ErrLibraryNotFound):
		return []Check{
			{Name: "driver", Status: Skip, Detail: noDriver + " (" + cmp.Or(info.LibPath, "libcuda.so.1") + " not found; --libcuda or CRYO_LIBCUDA names it if it is elsewhere)"},
			{Name: "gpus", Status: Skip, Detail: "no NVIDIA driver"},
		}
	case errors.Is(err, cuda.ErrNoCheckpointAPI):
		return []Check{{"driver", Fail, err.Error(), "upgrade the NVIDIA driver to ≥ 570 (580 recommended)"}}
	case err != nil:
		return []Check{{"driver", Fail, err.Error(), "check the NVIDIA driver installation (nvidia-smi)"}}
	}
	res := []Check{{Name: "driver", Status: OK, Detail: fmt.Sprintf("%s, CUDA %d.%d, checkpoint API present",
		info.LibPath, info.DriverVersion/1000, info.DriverVersion%1000/10)}}
	return append(res, e.checkGPUs(ctx)...)
}

func (e *env) checkGPUs(ctx context.Context) []Check {
	inv, err := e.driver.Inventory(ctx)
	if err != nil {
		return []Check{{"gpus", Warn, "NVML: " + err.Error(),
			"install libnvidia-ml.so.1 (part of the driver) or set CRYO_LIBNVML; restores cannot check GPU fit without it"}}
	}
	res := []Check{driverBranch(inv.DriverVersion)}
	if len(inv.GPUs) == 0 {
		return append(res, Check{"gpus", Warn, "the driver sees no GPU", "check nvidia-smi and the device nodes /dev/nvidia*"})
	}
	for _, g := range inv.GPUs {
		res = append(res, Check{Name: fmt.Sprintf("gpu %d", g.Index), Status: OK,
			Detail: fmt.Sprintf("%s (sm_%s) %s, %.1f/%.1f GiB free", g.Name, strings.ReplaceAll(g.ComputeCapability, ".", ""),
				g.UUID, cuda.GiB(g.MemoryFree), cuda.GiB(g.MemoryTotal))})
	}
	return res
}

func driverBranch(version string) Check {
	major, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	switch {
	case major == 0:
		return Check{"driver version", Warn, "unknown driver version " + strconv.Quote(version), "check the NVIDIA driver installation (nvidia-smi)"}
	case major < minDriverMajor:
		return Check{"driver version", Fail, version + ": no checkpoint API before 570", "upgrade the NVIDIA driver to ≥ 570 (580 recommended)"}
	case major < 580:
		return Check{"driver version", Warn, version + ": restore onto a different GPU (UUID remap) needs ≥ 580",
			"upgrade to the r580 driver branch to restore onto other GPUs of the same model"}
	}
	return Check{Name: "driver version", Status: OK, Detail: version + " (r580 features: GPU remap on restore)"}
}
