package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cryo-gpu/cryo/config"
	"github.com/cryo-gpu/cryo/cudacr"
	"github.com/cryo-gpu/cryo/runtime"
)

// cudaCommand is cuda-checkpoint's job without that binary: query, suspend
// and resume the CUDA state of running processes in place.
func cudaCommand() *cli.Command {
	return &cli.Command{
		Name:  "cuda",
		Usage: "show, suspend or resume the CUDA state of running processes",
		Description: `A suspended process keeps running on the CPU, but its GPU memory has been
copied into its host memory and it holds no GPU: another job can use the GPU,
or CRIU can checkpoint the process. "resume" copies the memory back.

Every driver call runs in a short-lived helper process with a deadline, so a
hung driver call becomes an error instead of a hung cryo.`,
		Subcommands: []*cli.Command{
			{
				Name:      "state",
				Usage:     "print the CUDA checkpoint state of each PID",
				ArgsUsage: "PID...",
				Flags:     driverFlags(),
				Action:    cudaState,
			},
			{
				Name:      "suspend",
				Usage:     "lock and checkpoint CUDA in each PID (rolls all back if one fails)",
				ArgsUsage: "PID...",
				Flags: append(driverFlags(),
					&cli.DurationFlag{Name: "lock-timeout", Value: 10 * time.Second, Usage: "how long the driver may wait for in-flight GPU work before locking"},
					parallelFlag,
					allowIPCFlag,
				),
				Action: cudaSuspend,
			},
			{
				Name:      "resume",
				Usage:     "restore and unlock CUDA in each PID (works from locked or checkpointed)",
				ArgsUsage: "PID...",
				Flags: append(driverFlags(),
					&cli.StringSliceFlag{Name: "gpu-map", Usage: "remap a GPU: OLD-UUID=NEW-UUID (repeatable)"},
					parallelFlag,
				),
				Action: cudaResume,
			},
		},
	}
}

// allowIPCFlag lets a checkpoint or suspend go ahead for NCCL ranks that
// cryo would refuse (see runtime.Orchestrator.AllowCUDAIPC).
var allowIPCFlag = &cli.BoolFlag{Name: "allow-cuda-ipc", EnvVars: []string{config.EnvAllowCUDAIPC},
	Usage: "suspend NCCL ranks even without NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0 in their environment (for jobs that set them from inside; driver 580 loses ranks that really share GPU memory)"}

// parallelFlag caps the processes whose driver calls run at once; the copies
// are bound by the kernel faulting in host memory, one CPU per process.
var parallelFlag = &cli.IntFlag{Name: "parallel", Value: 0, DefaultText: "up to 16",
	Usage: "processes handled at once (1: one after another)"}

// driverFlags are the options every command that calls the driver takes.
func driverFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "libcuda", EnvVars: []string{config.EnvLibCUDA}, Usage: "path of the CUDA driver library", DefaultText: "libcuda.so.1"},
		&cli.DurationFlag{Name: "call-timeout", Value: 30 * time.Second, Usage: "deadline of a driver call that copies no memory"},
		copyTimeoutFlag,
	}
}

func newDriver(c *cli.Context) *cudacr.Driver {
	opts := runtime.DriverOptions(cfg)
	opts.LibPath = c.String("libcuda")
	opts.CallTimeout = c.Duration("call-timeout")
	opts.CopyTimeout = c.Duration("copy-timeout")
	return cudacr.New(opts)
}

// pidArgs parses the PID arguments.
func pidArgs(c *cli.Context) ([]int, error) {
	if c.NArg() == 0 {
		return nil, fmt.Errorf("no PID given: usage: cryo cuda %s PID...", c.Command.Name)
	}
	pids := make([]int, 0, c.NArg())
	for _, a := range c.Args().Slice() {
		pid, err := strconv.Atoi(a)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%q is not a process id", a)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// signalContext is cancelled on SIGINT/SIGTERM/SIGHUP, so that an interrupted
// suspend still rolls back instead of leaving processes locked.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
}

func cudaState(c *cli.Context) error {
	pids, err := pidArgs(c)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	d := newDriver(c)
	failed := 0
	for _, pid := range pids {
		st, err := d.State(ctx, pid)
		if err != nil {
			fmt.Printf("%d\t-\t%v\n", pid, err)
			failed++
			continue
		}
		fmt.Printf("%d\t%s\n", pid, st)
		if st == cudacr.StateCheckpointed || st == cudacr.StateLocked {
			// Left so by `cryo cuda suspend`, or by a checkpoint killed
			// between its suspend and its dump.
			fmt.Fprintf(os.Stderr, "cryo: pid %d is suspended; unless a checkpoint of it is under way, `cryo cuda resume %d` resumes it\n", pid, pid)
		}
	}
	if failed > 0 {
		return cli.Exit("", 1)
	}
	return nil
}

// cudaTargets keeps the CUDA processes among pids and says which it skips.
func cudaTargets(ctx context.Context, d *cudacr.Driver, pids []int) ([]int, error) {
	procs, skipped, err := d.Find(ctx, pids)
	if err != nil {
		return nil, err
	}
	for _, s := range skipped {
		fmt.Fprintf(os.Stderr, "skipping pid %d: %s\n", s.PID, s.Reason)
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

func cudaSuspend(c *cli.Context) error {
	lt, err := lockTimeout(c)
	if err != nil {
		return err
	}
	opts := cudacr.SetOptions{LockTimeout: lt, OnProgress: progressPrinter(), Parallel: c.Int("parallel")}
	return cudaSet(c, "suspend", "suspended", func(ctx context.Context, d *cudacr.Driver, pids []int) error {
		if err := cudacr.CheckIPCOf(pids); err != nil && !c.Bool("allow-cuda-ipc") {
			return err
		}
		return d.Suspend(ctx, pids, opts)
	})
}

func cudaResume(c *cli.Context) error {
	pairs, err := runtime.ParseGPUMap(strings.Join(c.StringSlice("gpu-map"), ","))
	if err != nil {
		return err
	}
	opts := cudacr.SetOptions{GPUPairs: pairs, OnProgress: progressPrinter(), Parallel: c.Int("parallel")}
	return cudaSet(c, "resume", "resumed", func(ctx context.Context, d *cudacr.Driver, pids []int) error {
		return d.Resume(ctx, pids, opts)
	})
}

// cudaSet runs op on the CUDA processes among the PID arguments and reports
// how long it took. Interrupting it cancels op, which still rolls back.
func cudaSet(c *cli.Context, verb, done string, op func(context.Context, *cudacr.Driver, []int) error) error {
	pids, err := pidArgs(c)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	d := newDriver(c)
	targets, err := cudaTargets(ctx, d, pids)
	if err != nil {
		return err
	}
	// A checkpoint in progress owns its processes: suspending or resuming
	// them under it would corrupt its image.
	l, err := orchestrator().LockPIDs("cuda "+verb, targets)
	if err != nil {
		return fmt.Errorf("%s: %w; nothing was done", verb, err)
	}
	defer l.Release()
	start := time.Now()
	if err := op(ctx, d, targets); err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	fmt.Fprintf(os.Stderr, "%s %d process(es) in %s\n", done, len(targets), time.Since(start).Round(time.Millisecond))
	return nil
}
