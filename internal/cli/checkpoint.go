package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/words"
)

// checkpointCommand is the bare-process checkpoint: CRIU on a process tree,
// with CUDA suspended around the dump. The logic lives in runtime.
func (ap *app) checkpointCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint --pid PID --dir DIR [flags]\n  cryo checkpoint --finish DIR",
		Short: "checkpoint a process tree (and its GPU state) into a directory",
		Long: `Suspends CUDA in the tree's CUDA processes (their GPU memory moves into host
memory), dumps the tree with CRIU into DIR, and writes cryo-manifest.json with
the GPUs, driver, versions, step times and the sha256 of every image file.
DIR must be new or empty (it becomes 0700, its files 0600): a directory
holding anything is refused before any process is touched. The manifest
records, for each CUDA process, the GPUs it can see and the memory it holds
on each, so that a restore needs only those.

Without --leave-running the processes exit once dumped; restore them with
"cryo restore --dir DIR". If anything fails, CUDA is resumed and the processes
keep running. CRIU's log is DIR/criu-dump.log.

Stdio: /dev/null, files and sockets inside the tree are fine. A terminal needs
--shell-job (at restore too). Pipes to a process outside the tree (the shell
that started it) are restored as pipes nobody reads: redirect to a file
instead, e.g. start the program with "setsid prog </dev/null >log 2>&1 &".

For containers use the container tool: "ctr task checkpoint" with the cryo
runtime, "podman container checkpoint" with cryo-runc, or the kubelet's
checkpoint API; a pid inside a container is refused here.

--pre-hook runs before anything is suspended: an inference server drops its
KV cache (zeros the driver would copy), e.g. vLLM started with
--enable-sleep-mode: --pre-hook "http:POST /sleep?level=1 port=8000"
--post-hook "http:POST /wake_up port=8000"; SGLang started with
--enable-memory-saver: "http:POST /release_memory_occupation port=30000
json={}" and /resume_memory_occupation. An http: hook is a request to
127.0.0.1:N in the tree's network namespace (2xx is a success); an exec:
hook runs in the tree's namespaces as its user (exit 0 is a success). A
failed or timed-out --pre-hook ends the checkpoint with the tree untouched.
--post-hook wakes the server after --leave-running, and after a failed
checkpoint whose --pre-hook had run. Restore with "cryo restore
--post-hook" (see docs/kubernetes.md for the annotations of a pod).

--finish DIR completes a checkpoint whose run was interrupted after CRIU's
dump had completed (cryo killed while it hashed, a full disk at the last
write): it hashes the image files as they are now and writes the manifest.
"cryo restore" does the same by itself; a checkpoint whose dump did not
complete cannot be finished and must be taken again (see "cryo help
interrupted"). Two runs on one process collide at once, see "cryo help
locking".`,
		Example: `  cryo checkpoint --pid 4242 --dir /var/lib/ckpt/train
  cryo checkpoint --pid 4242 --dir /var/lib/ckpt/serve --leave-running --tcp-established --print-stats
  cryo checkpoint --pid 4242 --dir /var/lib/ckpt/vllm --pre-hook "http:POST /sleep?level=1 port=8000"`,
		Args: noArgs,
		RunE: ap.checkpointRun,
	}
	fs := cmd.Flags()
	fs.Int("pid", 0, "`PID` of the root of the process tree to checkpoint")
	fs.String("dir", "", "image directory `DIR` (created if missing; must not hold a checkpoint)")
	fs.String("finish", "", "complete the interrupted checkpoint in `DIR` instead (see above)")
	fs.Bool("leave-running", false, "keep the processes running after the dump (CUDA resumed)")
	fs.Bool("tcp-established", false, "checkpoint established TCP connections")
	fs.Bool("shell-job", false, "the tree is attached to a terminal or is not a session leader")
	fs.Bool("print-stats", false, "print the time of each step and CRIU's statistics on stdout, after the directory")
	fs.BoolP("quiet", "q", false, "no progress or messages on stderr (the image directory is printed on stdout either way)")
	addLockTimeout(fs)
	ap.addCopyTimeout(fs)
	ap.addAllowIPC(fs)
	addHookFlag(fs, "pre", "run HOOK in the tree before anything is suspended; its failure ends the checkpoint, the tree untouched")
	addHookFlag(fs, "post", "run HOOK after a --leave-running checkpoint or a failed one whose --pre-hook ran (the server wakes)")
	addFormatFlags(cmd, "{{.pid}} {{.dir}}")
	return cmd
}

func (ap *app) checkpointRun(cmd *cobra.Command, _ []string) error {
	lt, err := positive(cmd, "lock-timeout", "10s or 1m")
	if err != nil {
		return err
	}
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	if dir := fString(cmd, "finish"); dir != "" {
		// --finish works on a checkpoint already taken: flags of a new one
		// would be silently ignored.
		if err := onlyFlags(cmd, "--finish", "finish", "lock-timeout", "copy-timeout", "format", "json", "quiet"); err != nil {
			return err
		}
		return ap.finishRun(cmd.Context(), dir, fBool(cmd, "quiet"))
	}
	pid, dir := fInt(cmd, "pid"), fString(cmd, "dir")
	if pid <= 0 || dir == "" {
		return usageErrorf(cmd, "give --pid PID and --dir DIR, or --finish DIR")
	}
	drv, err := ap.driverOption(cmd)
	if err != nil {
		return err
	}
	pre, err := hookFlag(cmd, "pre")
	if err != nil {
		return err
	}
	wake, err := hookFlag(cmd, "post")
	if err != nil {
		return err
	}
	o := ap.orchestrator(cmd, drv, orchestrate.WithLockTimeout(lt), orchestrate.WithAllowCUDAIPC(fBool(cmd, "allow-cuda-ipc")))
	m, err := o.CheckpointProcess(cmd.Context(), orchestrate.ProcessOptions{
		PID:            pid,
		Dir:            dir,
		LeaveRunning:   fBool(cmd, "leave-running"),
		TCPEstablished: fBool(cmd, "tcp-established"),
		ShellJob:       fBool(cmd, "shell-job"),
		PreHook:        pre,
		Wake:           wake,
	})
	if err != nil {
		return err
	}
	res := newCheckpointResult(pid, dir, m)
	if asJSON {
		return ap.printJSON(ap.stdout, res)
	}
	// The directory is the result, on stdout with or without -q, as
	// restore's pid is; -q drops the messages on stderr only.
	if !fBool(cmd, "quiet") {
		fmt.Fprintf(ap.messages(), "checkpoint of pid %d written to %s (%s)\n", pid, dir, plural(len(m.Processes), "CUDA process", "CUDA processes"))
	}
	// A process left suspended is said even with -q: it needs the user.
	ap.stillSuspendedNote(cmd, m)
	if _, err := fmt.Fprintln(ap.stdout, dir); err != nil {
		return err
	}
	if fBool(cmd, "print-stats") {
		printStats(ap.stdout, res.Steps, res.CRIU)
	}
	return nil
}

func (ap *app) stillSuspendedNote(cmd *cobra.Command, m *manifest.Manifest) {
	if pids := orchestrate.StillSuspended(m); len(pids) > 0 && fBool(cmd, "leave-running") {
		fmt.Fprintf(ap.messages(), "note: CUDA in %s %v was suspended before this checkpoint and is still suspended: run `cryo cuda resume %s`\n", pluralWord(len(pids), "pid", "pids"), pids, strings.Trim(fmt.Sprint(pids), "[]"))
	}
}

// finishRun completes a checkpoint interrupted after its dump and prints
// its directory on stdout; quiet drops the message on stderr.
func (ap *app) finishRun(ctx context.Context, dir string, quiet bool) error {
	m, err := orchestrate.New(orchestrate.WithConfig(ap.cfg), orchestrate.WithLogger(ap.warnLogger()), orchestrate.WithFrontEnd(words.Remedies)).FinishCheckpoint(ctx, dir)
	if errors.Is(err, orchestrate.ErrNothingToFinish) {
		fmt.Fprintf(ap.messages(), "%v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	if !quiet {
		fmt.Fprintf(ap.messages(), "checkpoint in %s completed after an interruption: its %s hashed now, as they are, not as CRIU wrote them (%s)\n", dir, plural(len(m.Digests), "file was", "files were"), plural(len(m.Processes), "CUDA process", "CUDA processes"))
	}
	_, err = fmt.Fprintln(ap.stdout, dir)
	return err
}
