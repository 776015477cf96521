package cli

import (
	"cmp"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/status"
)

// psCommand is the view of what cryo and the driver know now, taken
// without waiting on either: a frozen or held process, a hung driver or a
// checkpoint under way must not hang the one command that should explain
// them.
func (ap *app) psCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "list the CUDA processes of this host, their CUDA state and cryo's runs on them",
		Long: `Lists every process of this host that uses the CUDA driver (it maps libcuda
or holds a /dev/nvidia* file), with the state the driver reports (running,
locked, checkpointed, failed), the GPUs it can see and the GPU memory it
holds, its container when cryo knows it, and the cryo run under way on it.
It also lists the cryo runs that hold a lock (a checkpoint in progress, a
restore, a pause, a "cryo cuda suspend") and the GPU-free pauses of
containers whose processes are gone.

cryo ps never waits. A process whose cgroup is frozen is shown "frozen"
without asking the driver (the driver's calls hang on a frozen process); a
process that another tracer holds (a cryo driver call under way) is shown
"busy" with that tracer's pid; every other process is asked with a deadline
(--timeout), and one the driver does not answer in time is shown
"unknown (driver did not answer)". "(stopped)" means cryo holds its threads
stopped, as it does while the GPU state is away (see "cryo cuda"). The lock
directory ($CRYO_LOCK_DIR, default /run/cryo/locks) is read without taking
a lock.

Columns: PID; CONTAINER (from a pause record, a lock, or a container
runtime's cgroup name; "-" if unknown); STATE; GPUS (NVML indices, or UUIDs
not on this host); MEMORY (GPU memory held; for a process a GPU-free pause
suspended, what it held before the pause); OPERATION (the cryo run holding
the process's lock and that cryo's pid, and "paused (GPU-free)").

--json prints one document, whose fields are stable:

  processes[]: pid, command, container, state (running, locked,
    checkpointed, failed, frozen, busy, unknown), stopped, frozen,
    tracer_pid (busy), detail (why busy or unknown), gpus[] (index, -1 if
    not on this host; uuid, name, memory_bytes), gpu_memory_bytes,
    operation, operation_pid, paused
  locks[]: the held locks: file, key ("id-<container>", "pid-<N>"),
    holder_pid, operation (checkpoint, restore, pause, resume, cuda
    suspend, cuda resume), target ("container ID", "pid N"), checkpoint
    (true while a checkpoint is in progress)
  pauses[]: the GPU-free pause records: container, file, processes[] (pid,
    gpu_memory_bytes held before the pause, alive)
  warnings[]: what could not be read (the GPU inventory, a pause record)

Exits 0 even when some state is unknown; 1 only when /proc cannot be read.`,
		Example: `  cryo ps
  cryo ps --json | jq '.processes[] | select(.state == "checkpointed")'
  cryo ps --json | jq '.locks[] | select(.checkpoint)'
  cryo cuda resume $(cryo ps -q)`,
		Args: noArgs,
		RunE: ap.ps,
	}
	fs := cmd.Flags()
	fs.BoolP("quiet", "q", false, "print the pids only, one a line")
	fs.Duration("timeout", 3*time.Second, "deadline of each driver query (and of the GPU inventory)")
	fs.String("libcuda", ap.cfg.LibCUDA, "`PATH` of the CUDA driver library (default libcuda.so.1; $"+config.EnvLibCUDA+")")
	addFormatFlags(cmd, "{{range .processes}}{{println .pid .state}}{{end}}")
	return cmd
}

func (ap *app) ps(cmd *cobra.Command, _ []string) error {
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	timeout, err := positive(cmd, "timeout", "2s")
	if err != nil {
		return err
	}
	opts := ap.runtimeDriverOptions()
	opts.LibPath = cmp.Or(fString(cmd, "libcuda"), opts.LibPath)
	opts.CallTimeout = timeout
	r, err := status.Collect(cmd.Context(), status.Options{LockDir: ap.cfg.LockDir, Driver: cuda.New(opts)})
	if err != nil {
		return report.WithRemedy(fmt.Errorf("ps: %w", err), "run cryo ps where /proc is mounted")
	}
	if !asJSON {
		for _, w := range r.Warnings {
			fmt.Fprintf(ap.messages(), "warning: %s\n", w)
		}
	}
	switch {
	case asJSON:
		return ap.printJSON(ap.stdout, r)
	case fBool(cmd, "quiet"):
		for _, pid := range r.PIDs() {
			fmt.Fprintln(ap.stdout, pid)
		}
		return nil
	}
	return status.WriteTable(ap.stdout, r)
}
