package cli

import (
	"cmp"
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/doctor"
)

func (ap *app) doctorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "check that this host can checkpoint and restore GPU containers",
		Long: `Checks whether this host can checkpoint and restore, and prints one line per
check: its status, its name and what it found, with the one fix under each
warning or failure, then a summary ("9 ok, 5 skipped, 2 warnings, 0 failed").
--json prints the same report as JSON (version, checks with name, status,
detail and fix, and summary: the counts {"ok", "skipped", "warnings",
"failed"} as numbers). --libcuda and --call-timeout choose the driver
as for "cryo cuda".

The statuses:
  - ok: checked and fine;
  - skip: absent, and cryo works without it: no NVIDIA driver ("no NVIDIA
    driver: GPU checkpoints unavailable, CPU containers work"), no
    containerd, no Podman;
  - warn: works, but not as well as it could, or a front end that is
    installed is not set up for cryo yet;
  - fail: cryo cannot checkpoint anything (CRIU missing or too old for the
    kernel, "criu check" failing, runc missing where containerd or Podman is
    installed), a front end is configured for cryo and that configuration
    is broken (its binary missing, an environment file cryo-runc refuses),
    or an NVIDIA driver is installed that cannot checkpoint (no checkpoint
    API, below 570).

The exit status is 1 if a check failed, 0 otherwise: a CPU-only host with
CRIU and runc passes.

The checks:
  kernel, cgroups        the kernel release and the cgroup version
  privileges             root with CAP_SYS_ADMIN and CAP_SYS_PTRACE, which CRIU
                         needs; otherwise "run as root (sudo)"
  huge pages             the transparent huge page mode (with "always" the
                         driver's suspend and CRIU's restore of 4 GiB were each
                         about a third faster on an H200 host; host-wide, so
                         cryo only points it out)
  copy limit             $CRYO_COPY_TIMEOUT
  criu, criu check       CRIU's version against the kernel (4.1 or later on
                         Linux 6.13+, 4.2 or later on 6.16+) and "criu check"
  criu fill              whether it is cryo's CRIU (contrib/criu), which fills
                         a restored process's memory with huge pages and from
                         several threads; a stock CRIU warns (restores of
                         large processes several times slower)
  criu hold              whether the CRIU dumps a container whose CUDA
                         processes cryo holds stopped (patch 0003); without
                         it, checkpoints of GPU containers are refused
  criu zero              whether the CRIU leaves all-zero pages out of the
                         dump (patch 0004); without it, zeroed GPU memory
                         (an unused KV cache) is written in full
  criu seccomp           whether the CRIU hands the restored threads' seccomp
                         filters to cryo's check (patch 0005); without it,
                         restores into a spec with seccomp are refused
  runc criu              the criu runc would run: runc looks it up on PATH by
                         name, and cryo-runc and the shim put $CRYO_CRIU's
                         directory first there; another CRIU warns
  runc                   $CRYO_RUNC, else the first runc on PATH that is not cryo
  driver, driver version, gpu N
                         the NVIDIA driver and its checkpoint API (570 or later;
                         580 to restore onto other GPUs), and each GPU with its
                         UUID, compute capability and free memory
  containerd shim        for each running containerd (or the installed one), the
                         containerd-shim-cryo-v2 it would start (first on its own
                         PATH, else next to its binary): it must be this cryo;
                         --address (default $CONTAINERD_ADDRESS) checks only the
                         daemon listening there, here and in "containerd cri"
                         and "annotation restore"
  containerd cri         the CRI runtime handler of type io.containerd.cryo.v2 in
                         containerd's effective configuration ("containerd
                         config dump"), its runtime_path, and pod_annotations
                         passing cryo.io/*
  cryo-runc              cryo-runc on PATH, and that it is this cryo
  podman runtime         an [engine.runtimes] entry for cryo-runc in Podman's
                         containers.conf files whose first existing path is
                         this cryo
  cryo-runc env          cryo-runc's environment file ($CRYO_RUNC_ENV, else
                         /etc/cryo/cryo-runc.env): it parses, and the paths it
                         names exist
  kubernetes             always skipped: the RuntimeClass lives in the API server
                         ("kubectl get runtimeclass cryo"); the node's side is
                         "containerd cri"`,
		Example: "  cryo doctor\n  cryo doctor --json | jq '.checks[] | select(.status != \"ok\")'",
		Args:    noArgs,
		RunE:    ap.doctorRun,
	}
	ap.addDriverFlags(cmd.Flags())
	cmd.Flags().String("address", "", "check only the containerd that listens on socket `PATH` (default $CONTAINERD_ADDRESS, else every running containerd)")
	addFormatFlags(cmd, "{{range .checks}}{{println .status .name}}{{end}}")
	return cmd
}

func (ap *app) doctorRun(cmd *cobra.Command, _ []string) error {
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	// criu check and containerd's config dump are bounded: a doctor that
	// hangs is no help.
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
	defer cancel()
	addr := cmp.Or(fString(cmd, "address"), os.Getenv("CONTAINERD_ADDRESS"))
	r := doctor.Run(ctx, doctor.Options{Config: ap.cfg, Driver: ap.newDriver(cmd), ContainerdAddress: addr})
	if asJSON {
		err = ap.printJSON(ap.stdout, r)
	} else {
		err = r.WriteText(ap.stdout)
	}
	if err != nil {
		return err
	}
	if r.Failed() {
		return &silentError{Code: ExitFailure}
	}
	return nil
}
