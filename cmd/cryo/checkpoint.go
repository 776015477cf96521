package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cryo-gpu/cryo/config"
	"github.com/cryo-gpu/cryo/runtime"
)

// checkpointCommand is the bare-process checkpoint: CRIU on a process tree,
// with CUDA suspended around the dump. The logic lives in runtime.
func checkpointCommand() *cli.Command {
	return &cli.Command{
		Name:      "checkpoint",
		Usage:     "checkpoint a process tree (and its GPU state) into a directory",
		UsageText: "cryo checkpoint --pid PID --dir DIR [--leave-running] [--tcp-established] [--shell-job]\n   cryo checkpoint --finish DIR",
		Description: `Suspends CUDA in the tree's CUDA processes (their GPU memory moves into host
memory), dumps the tree with CRIU into DIR, and writes cryo-manifest.json with
the GPUs, driver, step times and the sha256 of every image file.

Without --leave-running the processes exit once dumped; restore them with
"cryo restore --dir DIR". If anything fails, CUDA is resumed and the processes
keep running. CRIU's log is DIR/criu-dump.log.

Stdio: /dev/null, files and sockets inside the tree are fine. A terminal needs
--shell-job (at restore too). Pipes to a process outside the tree (the shell
that started it) are restored as pipes nobody reads: redirect to a file
instead, e.g. start the program with "setsid prog </dev/null >log 2>&1 &".

--finish DIR completes a checkpoint whose run was interrupted after CRIU's
dump had completed (cryo or cryo-runc killed while it hashed, a full disk
at the last write): it hashes the image files as they are now and writes the
manifest. "cryo restore" does the same by itself; a checkpoint whose dump did
not complete cannot be finished and must be taken again.`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "pid", Usage: "root of the process tree to checkpoint"},
			&cli.StringFlag{Name: "dir", Usage: "image directory (created if missing; must not hold a checkpoint)"},
			&cli.StringFlag{Name: "finish", Usage: "complete the interrupted checkpoint in `DIR` (see below) instead"},
			&cli.BoolFlag{Name: "leave-running", Usage: "keep the processes running after the dump (CUDA resumed)"},
			&cli.BoolFlag{Name: "tcp-established", Usage: "checkpoint established TCP connections"},
			&cli.BoolFlag{Name: "shell-job", Usage: "the tree is attached to a terminal or is not a session leader"},
			&cli.DurationFlag{Name: "lock-timeout", Value: 10 * time.Second, Usage: "how long the driver may wait for in-flight GPU work before locking"},
			copyTimeoutFlag,
			allowIPCFlag,
		},
		Action: checkpointAction,
	}
}

func checkpointAction(c *cli.Context) error {
	lt, err := lockTimeout(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	if dir := c.String("finish"); dir != "" {
		return finishAction(ctx, dir)
	}
	if c.Int("pid") == 0 || c.String("dir") == "" {
		return cli.Exit("cryo: give --pid PID and --dir DIR, or --finish DIR (see cryo checkpoint --help)", 2)
	}
	drv, err := driverOption(c)
	if err != nil {
		return err
	}
	o := orchestrator(drv, runtime.WithLockTimeout(lt), runtime.WithAllowCUDAIPC(c.Bool("allow-cuda-ipc")))
	m, err := o.CheckpointProcess(ctx, runtime.ProcessOptions{
		PID:            c.Int("pid"),
		Dir:            c.String("dir"),
		LeaveRunning:   c.Bool("leave-running"),
		TCPEstablished: c.Bool("tcp-established"),
		ShellJob:       c.Bool("shell-job"),
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "checkpoint of pid %d written to %s (%d CUDA process(es))\n", c.Int("pid"), c.String("dir"), len(m.Processes))
	if pids := runtime.StillSuspended(m); len(pids) > 0 && c.Bool("leave-running") {
		fmt.Fprintf(os.Stderr, "note: CUDA in pid(s) %v was suspended before this checkpoint and is still suspended: run `cryo cuda resume %s`\n", pids, strings.Trim(fmt.Sprint(pids), "[]"))
	}
	return nil
}

// finishAction completes a checkpoint interrupted after its dump.
func finishAction(ctx context.Context, dir string) error {
	m, err := orchestrator().FinishCheckpoint(ctx, dir)
	if errors.Is(err, runtime.ErrNothingToFinish) {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "checkpoint in %s completed after an interruption: its %d file(s) were hashed now, as they are, not as CRIU wrote them (%d CUDA process(es))\n", dir, len(m.Digests), len(m.Processes))
	return nil
}

// restoreCommand restores a bare-process checkpoint, detached.
func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "restore a process tree checkpointed by `cryo checkpoint`, or a checkpoint image",
		UsageText: "cryo restore --dir DIR [--shell-job] [--tcp-established]\n   cryo restore --image REF [--pull] [--address SOCK --namespace NS --name NEW --log FILE --gpus LIST]",
		Description: `Verifies DIR before touching anything: the manifest, the sha256 of every
image file, and that this host has the GPUs, free GPU memory and driver the
checkpoint needs. Then restores the tree with CRIU, detached (it is
re-parented to init when cryo exits), resumes CUDA with the GPUs remapped to
this host's, and prints the restored root's pid on stdout.

The processes get back their old pids, which must be free. A checkpoint taken
with --tcp-established is restored with its connections without the flag.
CRIU's log is DIR/criu-restore.log.

With --image, REF is a checkpoint image of the local store (pulled first
with --pull), restored as "cryo image restore REF" does: a containerd
checkpoint into the containerd at --address, as container --name, on the
GPUs of --gpus if given.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "dir", Usage: "the image `DIR` written by \"cryo checkpoint\""},
			&cli.StringFlag{Name: "image", Usage: "restore the checkpoint image `REF` instead (see \"cryo image restore\")"},
			&cli.BoolFlag{Name: "pull", Usage: "--image: pull REF from its registry first"},
			storeFlag, keyFlag(),
			&cli.BoolFlag{Name: "shell-job", Usage: "restore into this terminal and session (as given at checkpoint)"},
			&cli.BoolFlag{Name: "tcp-established", Usage: "restore established TCP connections (automatic when the checkpoint holds some)"},
			&cli.StringSliceFlag{Name: "gpu-map", EnvVars: []string{config.EnvGPUMap}, Usage: "restore the GPU OLD-UUID onto NEW-UUID of this host (OLD=NEW, repeatable); default: the same UUID if present, else any free GPU of the same model"},
			copyTimeoutFlag,
		}, append(containerdRestoreFlags(), remoteFlags()...)...),
		Action: restoreAction,
	}
}

func restoreAction(c *cli.Context) error {
	ctx, stop := signalContext()
	defer stop()
	if (c.String("dir") == "") == (c.String("image") == "") {
		return fmt.Errorf("give one of --dir DIR and --image REF")
	}
	if ref := c.String("image"); ref != "" {
		return restoreImage(ctx, c, ref, "")
	}
	pairs, err := runtime.ParseGPUMap(strings.Join(c.StringSlice("gpu-map"), ","))
	if err != nil {
		return err
	}
	drv, err := driverOption(c)
	if err != nil {
		return err
	}
	res, err := orchestrator(drv, runtime.WithGPUMap(pairs)).RestoreDetached(ctx, runtime.RestoreOptions{
		Dir:            c.String("dir"),
		ShellJob:       c.Bool("shell-job"),
		TCPEstablished: c.Bool("tcp-established"),
	})
	printRestored(res)
	return err
}

// printRestored prints the restored root's pid on stdout, and on stderr how
// many established TCP connections came back with it.
func printRestored(res *runtime.RestoreResult) {
	if res == nil {
		return
	}
	if res.TCPConnections > 0 {
		fmt.Fprintf(os.Stderr, "restored %d established TCP connection(s) (tcp-established)\n", res.TCPConnections)
	}
	fmt.Println(res.PID)
}

// orchestrator reports progress on stderr and keeps the structured log for
// failures only: the step lines already say what happened.
func orchestrator(opts ...runtime.Option) *runtime.Orchestrator {
	base := []runtime.Option{
		runtime.WithConfig(cfg),
		runtime.WithLogger(warnLogger()),
		runtime.WithEvents(stepPrinter()),
		runtime.WithCUDAProgress(progressPrinter()),
	}
	return runtime.New(append(base, opts...)...)
}

// warnLogger prints the orchestration's warnings (an unverified restore,
// an unavailable GPU inventory, a wait for TIME_WAIT…) on stderr; the steps
// themselves are the step printer's.
func warnLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // a terminal line needs no timestamp
			}
			return a
		},
	}))
}

// stepPrinter prints the long steps with their elapsed time, ticking every
// second while one runs so that a user sees work, not a hang.
func stepPrinter() func(runtime.Event) {
	long := map[runtime.Step]string{
		runtime.StepSuspend: "suspending CUDA", runtime.StepDump: "dumping with CRIU",
		runtime.StepResume: "resuming CUDA", runtime.StepDigests: "hashing image files",
		runtime.StepRollback: "rolling back: resuming CUDA", runtime.StepVerify: "verifying checkpoint",
		runtime.StepComplete: "completing a checkpoint interrupted after its dump: hashing its files as they are now",
		runtime.StepRestore:  "restoring with CRIU", runtime.StepPorts: "waiting for the listening ports to leave TIME_WAIT",
	}
	var stop chan struct{}
	return func(e runtime.Event) {
		what, ok := long[e.Step]
		if !ok {
			return
		}
		if !e.Done {
			fmt.Fprintf(os.Stderr, "%s: %s…\n", e.ID, what)
			stop = make(chan struct{})
			go tick(e.ID+": "+what, stop)
			return
		}
		close(stop)
		if e.Err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s failed after %s\n", e.ID, what, e.Elapsed.Round(time.Millisecond))
			return
		}
		fmt.Fprintf(os.Stderr, "%s: %s done in %s\n", e.ID, what, e.Elapsed.Round(time.Millisecond))
	}
}
