package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/config"
	"github.com/cryo-gpu/cryo/cudacr"
	"github.com/cryo-gpu/cryo/runtime"
)

// check is one line of the doctor's report.
type check struct {
	name, status, detail, fix string // status: ok, warn, FAIL, info
}

func doctorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "check that this host can checkpoint and restore GPU containers",
		Long: `Checks CRIU (version and "criu check"), runc, the kernel and cgroups, the
NVIDIA driver and its checkpoint API, and lists the GPUs. Every problem comes
with its fix. Exits 1 if something required is missing.`,
		Args: noArgs,
		RunE: doctor,
	}
	addDriverFlags(cmd.Flags())
	addFormatFlags(cmd)
	return cmd
}

func doctor(cmd *cobra.Command, _ []string) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
	defer cancel()
	checks := []check{checkKernel(), checkCgroups(), checkTHP(), checkCopyTimeout()}
	checks = append(checks, checkCRIU(ctx)...)
	checks = append(checks, checkRunc(ctx))
	checks = append(checks, checkDriver(ctx, newDriver(cmd))...)
	failed := 0
	for _, ch := range checks {
		fmt.Printf("%-5s %-12s %s\n", ch.status, ch.name, ch.detail)
		if ch.fix != "" {
			fmt.Printf("      %-12s fix: %s\n", "", ch.fix)
		}
		if ch.status == "FAIL" {
			failed++
		}
	}
	if failed > 0 {
		fmt.Printf("%d problem(s) found\n", failed)
		return &silentError{Code: ExitFailure}
	}
	return nil
}

// checkCopyTimeout reports a $CRYO_COPY_TIMEOUT that the front ends ignore.
func checkCopyTimeout() check {
	switch {
	case len(cfg.Problems) > 0:
		return check{"copy limit", "FAIL", cfg.Problems[0].Error(), "unset " + config.EnvCopyTimeout + " or give a positive duration"}
	case cfg.CopyTimeout > 0:
		return check{"copy limit", "ok", fmt.Sprintf("%s (%s): a hung GPU copy is cut off then", cfg.CopyTimeout, config.EnvCopyTimeout), ""}
	}
	return check{"copy limit", "ok", config.DefaultCopyTime.String() + " (default; set " + config.EnvCopyTimeout + " to change)", ""}
}

func checkKernel() check {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return check{"kernel", "warn", err.Error(), ""}
	}
	return check{"kernel", "ok", unix.ByteSliceToString(u.Release[:]), ""}
}

// checkTHP reports the transparent huge page mode. The driver's suspend
// writes the GPU memory into fresh host memory, and CRIU's restore fills
// fresh memory again: with 4 KiB pages both are bound by page faults. On an
// H200 host, "always" made a 4 GiB suspend and restore about a third faster
// (docs/benchmarks.md). It is a host-wide setting, so cryo only points it
// out.
func checkTHP() check {
	data, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return check{"huge pages", "info", "transparent huge pages not available", ""}
	}
	mode := string(data)
	if i, j := strings.Index(mode, "["), strings.Index(mode, "]"); i >= 0 && j > i {
		mode = mode[i+1 : j]
	}
	if mode == "always" {
		return check{"huge pages", "ok", "transparent huge pages: always", ""}
	}
	return check{"huge pages", "info", "transparent huge pages: " + mode + " (GPU checkpoints and restores copy host memory faster with \"always\")",
		"echo always > /sys/kernel/mm/transparent_hugepage/enabled, if the host's other work allows it"}
}

func checkCgroups() check {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return check{"cgroups", "ok", "v2 (unified)", ""}
	}
	return check{"cgroups", "ok", "v1 or hybrid", ""}
}

func checkCRIU(ctx context.Context) []check {
	info, err := runtime.ProbeCRIU(cfg.CRIU)
	if err != nil {
		return []check{{"criu", "FAIL", err.Error(), "install CRIU 4.2.1: `make deps` (contrib/install-deps.sh) builds it, or set CRYO_CRIU"}}
	}
	path := info.Path
	res := []check{{"criu", "ok", info.VersionString() + " (" + path + ")", ""}}
	if err := info.Check(); err != nil {
		res[0] = check{"criu", "FAIL", err.Error(), "`make deps` builds CRIU 4.2.1 from Debian's source"}
	}
	out, err := exec.CommandContext(ctx, path, "check").CombinedOutput()
	if err != nil {
		res = append(res, check{"criu check", "FAIL", lastLine(string(out)), "run `criu check` as root and fix what it reports"})
	} else {
		res = append(res, check{"criu check", "ok", lastLine(string(out)), ""})
	}
	return res
}

func checkRunc(ctx context.Context) check {
	path, err := exec.LookPath("runc")
	if err != nil {
		return check{"runc", "FAIL", "not found on PATH", "install runc (Debian: apt-get install runc)"}
	}
	out, _ := exec.CommandContext(ctx, path, "--version").Output()
	first, _, _ := strings.Cut(string(out), "\n")
	return check{"runc", "ok", strings.TrimSpace(first) + " (" + path + ")", ""}
}

// minDriverMajor is the first driver branch with the checkpoint API that cryo
// needs; r580 adds GPU remapping on restore.
const minDriverMajor = 570

func checkDriver(ctx context.Context, d *cudacr.Driver) []check {
	info, err := d.Probe(ctx)
	switch {
	case errors.Is(err, cudacr.ErrLibraryNotFound):
		return []check{{"driver", "FAIL", "libcuda.so.1 not found: " + err.Error(),
			"install the NVIDIA driver ≥ 570, or point --libcuda / CRYO_LIBCUDA at libcuda.so.1; CPU-only containers still work"}}
	case errors.Is(err, cudacr.ErrNoCheckpointAPI):
		return []check{{"driver", "FAIL", err.Error(), "upgrade the NVIDIA driver to ≥ 570 (580 recommended)"}}
	case err != nil:
		return []check{{"driver", "FAIL", err.Error(), "check the NVIDIA driver installation (nvidia-smi)"}}
	}
	res := []check{{"driver", "ok", fmt.Sprintf("%s, CUDA %d.%d, checkpoint API present", info.LibPath, info.DriverVersion/1000, info.DriverVersion%1000/10), ""}}
	return append(res, checkGPUs(ctx, d)...)
}

func checkGPUs(ctx context.Context, d *cudacr.Driver) []check {
	inv, err := d.Inventory(ctx)
	if err != nil {
		return []check{{"gpus", "warn", "NVML: " + err.Error(), "install libnvidia-ml.so.1 (part of the driver) or set CRYO_LIBNVML; restores cannot check GPU fit without it"}}
	}
	res := []check{driverBranch(inv.DriverVersion)}
	if len(inv.GPUs) == 0 {
		return append(res, check{"gpus", "warn", "no GPU visible", "check nvidia-smi and the device nodes /dev/nvidia*"})
	}
	for _, g := range inv.GPUs {
		res = append(res, check{fmt.Sprintf("gpu %d", g.Index), "info",
			fmt.Sprintf("%s (sm_%s) %s, %.1f/%.1f GiB free", g.Name, strings.ReplaceAll(g.ComputeCapability, ".", ""), g.UUID, gib(g.MemoryFree), gib(g.MemoryTotal)), ""})
	}
	return res
}

func driverBranch(version string) check {
	major, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	switch {
	case major == 0:
		return check{"driver ver", "warn", "unknown driver version " + strconv.Quote(version), ""}
	case major < minDriverMajor:
		return check{"driver ver", "FAIL", version, "upgrade the NVIDIA driver to ≥ 570 (580 recommended)"}
	case major < 580:
		return check{"driver ver", "warn", version + ": restore onto a different GPU (UUID remap) needs ≥ 580", "upgrade to the r580 driver branch to restore onto other GPUs of the same model"}
	}
	return check{"driver ver", "ok", version + " (r580 features: GPU remap on restore)", ""}
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
