package cli

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/words"
)

// restoreCommand restores a bare-process checkpoint, detached, or an image.
func (ap *app) restoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore --dir DIR [flags]\n  cryo restore --image REF [flags]\n  cryo restore --import FILE [flags]",
		Short: "restore a process tree checkpointed by `cryo checkpoint`, or a checkpoint image",
		Long: `Verifies DIR before touching anything: the manifest, the sha256 of every
image file, and that this host has the GPUs, free GPU memory and driver the
checkpoint needs. Then restores the tree with CRIU, detached (it is
re-parented to init when cryo exits), resumes CUDA with the GPUs remapped to
this host's, and prints the restored root's pid on stdout.

The processes get back their old pids, which must be free. Each process is
restored onto as many GPUs as it saw: by default the same UUIDs where
present, else free GPUs of the same model with room for what it held.
--gpu-map OLD=NEW (repeatable, or $CRYO_GPU_MAP) picks targets; a partial map
is completed (on a 2-GPU process, GPU0=GPU1 becomes a swap) or refused with
the reason (docs/multi-gpu.md). A checkpoint taken
with --tcp-established is restored with its connections without the flag.
A checkpoint taken with --shell-job is restored with --shell-job into the
terminal cryo runs in. CRIU's log is DIR/criu-restore.log.

--post-hook runs once the tree runs with its GPU state: an inference server
that slept for its checkpoint (cryo checkpoint --pre-hook) wakes, e.g.
vLLM: --post-hook "http:POST /wake_up port=8000". If it fails, the tree
runs on, the error is printed and cryo exits non-zero; the pid is printed
either way.

With --image, REF is a checkpoint image of the local store (pulled first
with --pull), restored as "cryo image restore REF" does: a containerd
checkpoint into the containerd at --address, as container --name, on the
GPUs of --gpus if given; a bare-process checkpoint onto the GPUs of
--gpu-map if given.

With --import, FILE is a checkpoint archive ("cryo image export",
"podman container checkpoint --export", "ctr image export"): unpacked into a
private work directory under the restore directory, within the bounds of an
image restore, checked as a directory is, restored as above, and removed
afterwards. --dir given a file restores it as --import does.`,
		Example: `  cryo restore --dir /var/lib/ckpt/train
  cryo restore --dir /var/lib/ckpt/train --gpu-map GPU-aaaa…=GPU-bbbb… --print-stats
  cryo restore --image registry.example:5000/ckpt/train:v1 --pull
  cryo image export /var/lib/ckpt/train train.tar && cryo restore --import train.tar`,
		Args: noArgs,
		RunE: ap.restoreRun,
	}
	fs := cmd.Flags()
	fs.String("dir", "", "the image directory `DIR` written by \"cryo checkpoint\"")
	fs.String("image", "", "restore the checkpoint image `REF` instead (see \"cryo image restore\")")
	fs.String("import", "", "restore the checkpoint archive `FILE` instead (\"cryo image export\", \"podman container checkpoint --export\")")
	ap.addImageRestoreFlags(fs, restoreHelp{
		pull:       "--image: pull REF from its registry first",
		shellJob:   "restore into this terminal and session (as given at checkpoint)",
		printStats: "print the time of each step and CRIU's statistics on stdout, after the pid",
	})
	addHookFlag(fs, "post", "--dir: run HOOK once the tree runs with its GPU state; on its failure the tree runs on, and cryo exits non-zero")
	addFormatFlags(cmd, "{{.pid}} {{.seconds}}")
	return cmd
}

func (ap *app) restoreRun(cmd *cobra.Command, _ []string) error {
	dir, ref, file := fString(cmd, "dir"), fString(cmd, "image"), fString(cmd, "import")
	if given(dir, ref, file) != 1 {
		return usageErrorf(cmd, "give one of --dir DIR, --image REF and --import FILE")
	}
	if (file != "" || ref != "") && (cmd.Flags().Changed("post-hook") || cmd.Flags().Changed("post-hook-timeout")) {
		return usageErrorf(cmd, "--post-hook works with --dir only")
	}
	if file != "" {
		return ap.restoreImport(cmd, file)
	}
	if ref != "" {
		if err := refNotPath(cmd, "--image", ref); err != nil {
			return err
		}
		return ap.restoreImage(cmd, ref, "")
	}
	if err := checkPath(dir); err != nil {
		return err
	}
	if isArchive(dir) {
		return ap.restoreDirArchive(cmd, dir)
	}
	return ap.restoreDir(cmd, dir)
}

// restoreDir restores a bare-process checkpoint directory, detached.
func (ap *app) restoreDir(cmd *cobra.Command, dir string) error {
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	pairs, err := gpuMap(cmd)
	if err != nil {
		return err
	}
	drv, err := ap.driverOption(cmd)
	if err != nil {
		return err
	}
	post, err := hookFlag(cmd, "post")
	if err != nil {
		return err
	}
	res, err := ap.orchestrator(cmd, drv, orchestrate.WithGPUMap(pairs)).RestoreDetached(cmd.Context(), orchestrate.RestoreOptions{
		Dir:            dir,
		ShellJob:       fBool(cmd, "shell-job"),
		TCPEstablished: fBool(cmd, "tcp-established"),
		PostHook:       post,
	})
	if res != nil {
		ap.printRestored(cmd, asJSON, newRestoreResult(dir, res))
	}
	if err == nil && fBool(cmd, "shell-job") && !asJSON {
		return ap.waitShellJob(res.PID)
	}
	return err
}

// waitShellJob keeps cryo in the terminal's foreground while the restored
// job runs, as "criu restore --shell-job" does: the job is cryo's child, in
// cryo's process group, so it reads the terminal only while cryo waits. The
// exit status is the job's.
func (ap *app) waitShellJob(pid int) error {
	fmt.Fprintf(ap.messages(), "pid %d runs on this terminal; cryo waits for it to exit\n", pid)
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil // not our child (restored by an older path): nothing to wait for
		}
		break
	}
	switch {
	case ws.Exited() && ws.ExitStatus() != 0:
		return &silentError{Code: ws.ExitStatus()}
	case ws.Signaled():
		return &silentError{Code: 128 + int(ws.Signal())}
	}
	return nil
}

// printRestored prints the restored root's pid on stdout (or the JSON
// result), and on stderr how many established TCP connections came back.
func (ap *app) printRestored(cmd *cobra.Command, asJSON bool, r restoreResult) {
	if asJSON {
		_ = ap.printJSON(ap.stdout, r)
		return
	}
	if r.TCPConnections > 0 {
		fmt.Fprintf(ap.messages(), "restored %s (tcp-established)\n", plural(r.TCPConnections, "established TCP connection", "established TCP connections"))
	}
	fmt.Fprintln(ap.stdout, r.PID)
	if fBool(cmd, "print-stats") {
		printRestoreStats(ap.stdout, r.Steps, r.CRIU)
	}
}

// orchestrator draws its long steps on the invocation's progress renderer
// and logs warnings only: the step lines already say what happened.
func (ap *app) orchestrator(cmd *cobra.Command, opts ...orchestrate.Option) *orchestrate.Orchestrator {
	r := ap.renderer(cmd)
	base := []orchestrate.Option{orchestrate.WithConfig(ap.cfg), orchestrate.WithLogger(ap.warnLogger()), orchestrate.WithProgress(r), orchestrate.WithFrontEnd(words.Remedies)}
	return orchestrate.New(append(base, opts...)...)
}

// warnLogger prints the orchestration's warnings (an unverified restore,
// an unavailable GPU inventory, a wait for TIME_WAIT…) on stderr, worded
// for a person (see termHandler).
func (ap *app) warnLogger() *slog.Logger { return warnLoggerTo(ap.messages()) }

func warnLoggerTo(w io.Writer) *slog.Logger {
	return slog.New(&termHandler{mu: new(sync.Mutex), w: w})
}
