package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// cudaCommand is cuda-checkpoint's job without that binary: query, suspend
// and resume the CUDA state of running processes in place.
func (ap *app) cudaCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cuda",
		Short: "show, suspend or resume the CUDA state of running processes",
		Long: `A suspended process holds no GPU: its GPU memory has been copied into its
host memory, another job can use the GPU, or CRIU can checkpoint the process.
"resume" copies the memory back.

No thread of a suspended process runs: from the driver's checkpoint until its
restore, every thread is held in a group stop (as SIGSTOP leaves it, state T
in ps), and only the driver's restore thread runs, its signals blocked, while
the driver copies. A thread that ran while the GPU state is away could read
the driver's mappings and die (JAX's threads do). "resume" lets the threads
run only once the GPU state is back. If cryo is killed meanwhile, the process
stays stopped and suspended, never running without its GPU state: "cryo cuda
resume PID" brings it back.

Every driver call runs in a short-lived helper process with a deadline, so a
hung driver call becomes an error instead of a hung cryo: --call-timeout
(default 30s) bounds the calls that copy nothing, --copy-timeout (default 10m,
$CRYO_COPY_TIMEOUT) the copies. --libcuda (or $CRYO_LIBCUDA) names the driver
library if it is not on the loader's path.

The processes of one call go through the driver in phases (lock all, then
checkpoint all; restore all, then unlock all), and within a phase in
parallel, each in its own helper process: the copies are bound by the kernel
faulting in each process's host memory, one CPU per process. Four processes
of 4 GiB suspend in 2.5 s instead of 8.9 s one after another, and resume in
1.3 s instead of 3.5 s (H200). --parallel N caps the processes handled at
once; --parallel 1 is one after another.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf(cmd, "a subcommand is required: state, suspend or resume")
		},
	}
	cmd.AddCommand(ap.cudaStateCommand(), ap.cudaSuspendCommand(), ap.cudaResumeCommand())
	return cmd
}

func (ap *app) cudaStateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state PID...",
		Short: "print the CUDA checkpoint state of each PID",
		Long: `Prints running, locked, checkpointed or failed for each PID, whether cryo
holds its threads stopped, and says how to resume a process left suspended.

It answers at once where the driver cannot: a process whose cgroup is frozen
(a paused container) is "frozen" and one another tracer holds (a cryo call
under way) is "busy", without a driver call (the driver's calls hang on a
frozen process). cryo's locks are read without locking: when a checkpoint of
the process (or of its container) is in progress, the message says so
instead of suggesting "cryo cuda resume". --json prints pid, state, stopped,
frozen, operation and operation_pid (the cryo run holding its lock) and
error per PID. Exits 1 if a PID could not be queried.`,
		Example: "  cryo cuda state 4242 4243\n  cryo cuda state --json 4242",
		Args:    minArgs(1),
		RunE:    ap.cudaState,
	}
	ap.addDriverFlags(cmd.Flags())
	addFormatFlags(cmd, "{{.pid}} {{.state}}")
	return cmd
}

func (ap *app) cudaSuspendCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "suspend PID...",
		Short: "lock and checkpoint CUDA in each PID (rolls all back if one fails)",
		Long: `Locks each CUDA process (in-flight GPU work drains, new work waits) and
checkpoints it: its GPU memory moves into its host memory and it releases the
GPU. If one process fails, the ones already suspended are returned to
running, one at a time. Non-CUDA processes are skipped with a message.

--lock-timeout bounds the wait for in-flight work. Processes the driver
could not resume are refused before anything is suspended: NCCL ranks whose
transports share GPU memory (docs/multi-gpu.md), and JAX processes on several
GPUs (docs/gpu-workloads.md). --allow-cuda-ipc overrides that, for a job
that avoids the first by means cryo cannot see, or a driver that restores
them.`,
		Example: "  cryo cuda suspend 4242\n  cryo cuda suspend --lock-timeout 1m $(pgrep -f train.py)",
		Args:    minArgs(1),
		RunE:    ap.cudaSuspend,
	}
	fs := cmd.Flags()
	ap.addDriverFlags(fs)
	addLockTimeout(fs)
	addParallel(fs)
	ap.addAllowIPC(fs)
	addSetOutputFlags(cmd)
	return cmd
}

func (ap *app) cudaResumeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume PID...",
		Short: "restore and unlock CUDA in each PID (works from locked or checkpointed)",
		Long: `Copies each process's GPU memory back onto a GPU and unlocks it, from
checkpointed or from locked. --gpu-map OLD-UUID=NEW-UUID (repeatable) passes a
GPU map to the driver as given (driver 580 or later): it must be a one-to-one
map over exactly the GPUs the process sees, or the driver answers
CUDA_ERROR_INVALID_VALUE and the process stays suspended. "cryo restore
--gpu-map" completes a partial map for you.

A PID whose CUDA is running is skipped with a message, so that
"cryo cuda resume $(cryo ps -q)" resumes the suspended processes of the
host and counts those alone; with none suspended it does nothing and
exits 0.`,
		Example: "  cryo cuda resume 4242\n  cryo cuda resume --gpu-map GPU-aaaa…=GPU-bbbb… 4242\n  cryo cuda resume $(cryo ps -q)",
		Args:    minArgs(1),
		RunE:    ap.cudaResume,
	}
	fs := cmd.Flags()
	ap.addDriverFlags(fs)
	ap.addGPUMapFlag(fs)
	addParallel(fs)
	addSetOutputFlags(cmd)
	return cmd
}

// addParallel caps the processes whose driver calls run at once; the copies
// are bound by the kernel faulting in host memory, one CPU per process.
func addParallel(fs *pflag.FlagSet) {
	fs.Int("parallel", 0, "`N` processes handled at once (1: one after another; default up to 16)")
}

func (ap *app) newDriver(cmd *cobra.Command) *cuda.Driver {
	opts := ap.runtimeDriverOptions()
	opts.LibPath = cmp.Or(fString(cmd, "libcuda"), opts.LibPath)
	opts.CallTimeout = fDuration(cmd, "call-timeout")
	opts.CopyTimeout = fDuration(cmd, "copy-timeout")
	return cuda.New(opts)
}

// pidArgs parses the PID arguments.
func pidArgs(cmd *cobra.Command, args []string) ([]int, error) {
	pids := make([]int, 0, len(args))
	for _, a := range args {
		pid, err := strconv.Atoi(a)
		if err != nil || pid <= 0 {
			return nil, usageErrorf(cmd, "%q is not a process id", a)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// cudaTargets keeps the CUDA processes among pids and says which it skips.
func (ap *app) cudaTargets(ctx context.Context, d *cuda.Driver, pids []int) ([]int, error) {
	procs, skipped, err := d.Find(ctx, pids)
	if err != nil {
		return nil, err
	}
	for _, s := range skipped {
		fmt.Fprintf(ap.messages(), "skipping pid %d: %s\n", s.PID, s.Reason)
	}
	out := make([]int, 0, len(procs))
	for _, p := range procs {
		out = append(out, p.PID)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("none of the given processes uses CUDA; nothing to do")
	}
	return out, nil
}

func (ap *app) cudaSuspend(cmd *cobra.Command, args []string) error {
	lt, err := positive(cmd, "lock-timeout", "10s or 1m")
	if err != nil {
		return err
	}
	opts := cuda.SetOptions{LockTimeout: lt, Parallel: fInt(cmd, "parallel")}
	return ap.cudaSet(cmd, args, "suspend", "suspended", func(ctx context.Context, d *cuda.Driver, pids []int) error {
		if !fBool(cmd, "allow-cuda-ipc") {
			if err := errors.Join(cuda.CheckIPCOf(pids), cuda.CheckXLAOf(pids)); err != nil {
				return err
			}
		}
		return orchestrate.CUDASuspend(ctx, d, pids, opts, ap.renderer(cmd))
	})
}

func (ap *app) cudaResume(cmd *cobra.Command, args []string) error {
	pairs, err := gpuMap(cmd)
	if err != nil {
		return err
	}
	opts := cuda.SetOptions{GPUPairs: pairs, Parallel: fInt(cmd, "parallel")}
	return ap.cudaSet(cmd, args, "resume", "resumed", func(ctx context.Context, d *cuda.Driver, pids []int) error {
		return orchestrate.CUDAResume(ctx, d, pids, opts, ap.renderer(cmd))
	})
}

// cudaSet runs op on the CUDA processes among the PID arguments and reports
// how long it took. Interrupting it cancels op, which still rolls back.
func (ap *app) cudaSet(cmd *cobra.Command, args []string, verb, done string, op func(context.Context, *cuda.Driver, []int) error) error {
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	pids, err := pidArgs(cmd, args)
	if err != nil {
		return err
	}
	if _, err := ap.copyTimeout(cmd); err != nil {
		return err
	}
	ctx := cmd.Context()
	d := ap.newDriver(cmd)
	targets, err := ap.cudaTargets(ctx, d, pids)
	if err != nil {
		return notRootCUDA(verb, err)
	}
	if verb == "resume" {
		if targets = ap.suspendedOnly(ctx, d, targets); len(targets) == 0 {
			return ap.nothingSuspended(cmd, asJSON)
		}
	}
	// A checkpoint in progress owns its processes: suspending or resuming
	// them under it would corrupt its image.
	l, err := ap.orchestrator(cmd).LockPIDs("cuda "+verb, targets)
	if err != nil {
		return notRootCUDA(verb, fmt.Errorf("%s: %w; nothing was done", verb, err))
	}
	defer l.Release()
	var res *cudaSetResults
	if asJSON {
		res = beginCUDAResults(ctx, d, targets, verb)
	}
	start := time.Now()
	err = op(ctx, d, targets)
	if err == nil {
		err = checkSet(ctx, d, targets, verb)
	}
	if err != nil {
		err = notRootCUDA(verb, fmt.Errorf("%s: %w", verb, err))
	}
	switch {
	case asJSON:
		return res.finish(ctx, ap, d, time.Since(start), err)
	case err != nil:
		return err
	case fBool(cmd, "quiet"):
		for _, pid := range targets {
			fmt.Fprintln(ap.stdout, pid)
		}
		return nil
	}
	fmt.Fprintf(ap.messages(), "%s %s in %s\n", done, plural(len(targets), "process", "processes"), time.Since(start).Round(time.Millisecond))
	return nil
}

// checkSet checks what a suspend or resume is about to report: each
// process alive, and in the state the verb promises by the driver's own
// word. "resumed" is never the expected outcome of a branch.
func checkSet(ctx context.Context, d *cuda.Driver, pids []int, verb string) error {
	want := cuda.StateRunning
	if verb == "suspend" {
		want = cuda.StateCheckpointed
	}
	var bad []string
	for _, pid := range pids {
		if !procfs.Alive(pid) {
			bad = append(bad, fmt.Sprintf("pid %d died", pid))
			continue
		}
		if st, err := d.State(ctx, pid); err == nil && st != want {
			bad = append(bad, fmt.Sprintf("the driver reports pid %d %s", pid, st))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return report.WithRemedy(fmt.Errorf("checked after the %s: %s", verb, strings.Join(bad, "; ")),
		fmt.Sprintf("run `cryo cuda state %d` to see where each process stands", pids[0]))
}

// notRootCUDA turns a permission refusal met by a non-root caller (the
// processes' /proc files, cryo's lock directory, the driver's attach) into
// the not-permitted refusal the other commands give: exit 77, "run as
// root", instead of a raw "permission denied" and exit 1.
func notRootCUDA(verb string, err error) error {
	if err == nil || os.Geteuid() == 0 || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return &precheck.Error{Err: precheck.ErrNotRoot,
		Detail: fmt.Sprintf("cryo cuda %s attaches to the processes and takes cryo's locks, which needs root (uid %d): %v", verb, os.Geteuid(), err),
		Remedy: "run as root (sudo)"}
}

// suspendedOnly keeps the processes a resume has work for: checkpointed or
// locked. `cryo cuda resume $(cryo ps -q)` names every CUDA process of the
// host; the running ones are skipped with a message, so that the count
// printed is of the processes whose state changed. One the driver cannot
// answer for is kept: the resume reports what it finds.
func (ap *app) suspendedOnly(ctx context.Context, d *cuda.Driver, pids []int) []int {
	out := make([]int, 0, len(pids))
	for _, pid := range pids {
		st, err := d.State(ctx, pid)
		if err == nil && st != cuda.StateCheckpointed && st != cuda.StateLocked {
			fmt.Fprintf(ap.messages(), "skipping pid %d: %s, not suspended\n", pid, st)
			continue
		}
		out = append(out, pid)
	}
	return out
}

// nothingSuspended is a resume with nothing to do: not a failure, the
// processes are where the user wants them.
func (ap *app) nothingSuspended(cmd *cobra.Command, asJSON bool) error {
	if asJSON {
		return ap.printJSON(ap.stdout, []cudaSetResult{})
	}
	if !fBool(cmd, "quiet") {
		fmt.Fprintln(ap.messages(), "resumed 0 processes: none of them is suspended")
	}
	return nil
}
