package cli

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// recoverCommand brings back a tree that a killed cryo left stopped.
func (ap *app) recoverCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "recover PID|DIR",
		Short: "bring back to running a process tree that a killed cryo left stopped",
		Long: `Brings back the process tree rooted at PID (or the one the checkpoint in DIR
was taken of) when a cryo that was killed (SIGKILL, an OOM kill, a lost node
agent) left it stopped, with CUDA checkpointed or locked: "cryo ps" shows
such a process as "stopped, CUDA checkpointed: run cryo recover PID".

The order is the one that keeps the workload: it waits until no tracer holds
the tree (a CRIU dump that outlived its cryo ends on its own), resumes CUDA
with the driver, then continues every process (SIGCONT), then checks that
each one runs and that the driver reports its CUDA running. A SIGCONT first
would let threads run on a checkpointed GPU, and they crash. "recovered" is
printed only once that check passed; otherwise the message says which pids
died or still wait, and what to do.

A dump that the recovered tree ran on from is stale: take a new checkpoint.`,
		Example: `  cryo recover 4242
  cryo recover /var/lib/ckpt/train`,
		Args: exactArgs(1),
		RunE: ap.recoverRun,
	}
}

func (ap *app) recoverRun(cmd *cobra.Command, args []string) error {
	pid, err := recoverTarget(cmd, args[0])
	if err != nil {
		return err
	}
	res, err := ap.orchestrator(cmd).Recover(cmd.Context(), pid)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("pid %d recovered: checked, %s running", pid, plural(len(res.PIDs), "process", "processes"))
	if len(res.CUDA) > 0 {
		line += fmt.Sprintf(", CUDA resumed in %v", res.CUDA)
	}
	fmt.Fprintln(ap.messages(), line) // one write: messages() keeps whole lines only
	return nil
}

// recoverTarget is the root pid: PID itself, or the one DIR's manifest
// names.
func recoverTarget(cmd *cobra.Command, arg string) (int, error) {
	if n, err := strconv.Atoi(arg); err == nil && n > 0 {
		return n, nil
	}
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		return orchestrate.RecoverPID(arg)
	}
	return 0, usageErrorf(cmd, "%q is neither a pid nor a checkpoint directory", arg)
}
