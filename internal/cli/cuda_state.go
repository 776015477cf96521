package cli

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/status"
)

// cudaStateLine is one PID of `cryo cuda state --json`.
type cudaStateLine struct {
	PID int `json:"pid"`
	// State is the driver's (running, locked, checkpointed, failed), or
	// frozen or busy when the driver was not asked (see cryo ps).
	State string `json:"state,omitempty"`
	// Stopped: every thread is held stopped, as `cryo cuda suspend`
	// leaves a process while its GPU state is away.
	Stopped bool `json:"stopped,omitempty"`
	// Frozen: its cgroup is frozen (a paused container).
	Frozen bool `json:"frozen,omitempty"`
	// Operation is the cryo run holding its lock ("checkpoint", …) and
	// OperationPID that cryo's pid.
	Operation    string `json:"operation,omitempty"`
	OperationPID int    `json:"operation_pid,omitempty"`
	Error        string `json:"error,omitempty"`
}

func (ap *app) cudaState(cmd *cobra.Command, args []string) error {
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	pids, err := pidArgs(cmd, args)
	if err != nil {
		return err
	}
	d := ap.newDriver(cmd)
	// Read without locking: a view must neither wait for a checkpoint nor
	// make one that starts meanwhile lose its lock.
	locks, _ := lock.Read(cmp.Or(ap.cfg.LockDir, config.DefaultLockDir))
	lines, failed := make([]cudaStateLine, 0, len(pids)), 0
	for _, pid := range pids {
		l := stateOf(cmd.Context(), d, pid, locks)
		if l.Error != "" {
			failed++
		}
		if note := stateNote(l); note != "" {
			fmt.Fprintf(ap.messages(), "cryo: pid %d %s\n", pid, note)
		}
		lines = append(lines, l)
	}
	if asJSON {
		if err := ap.printJSON(ap.stdout, lines); err != nil {
			return err
		}
	} else {
		ap.printStateLines(lines)
	}
	if failed > 0 {
		return &silentError{Code: ExitFailure}
	}
	return nil
}

// stateOf is one pid's line, asked of the driver only when it can answer
// at once: its calls hang on a frozen process (until --call-timeout), and
// fail on one another tracer holds (a cryo call under way on it).
func stateOf(ctx context.Context, d *cuda.Driver, pid int, locks []lock.Info) cudaStateLine {
	l := cudaStateLine{PID: pid}
	if lk, ok := lockOf(pid, locks); ok {
		l.Operation, l.OperationPID = lk.Op, lk.HolderPID
	}
	switch {
	case procfs.Frozen(pid):
		l.State, l.Frozen = status.StateFrozen, true
	case procfs.Tracer(pid) > 0:
		l.State = status.StateBusy
	default:
		st, err := d.State(ctx, pid)
		if err != nil {
			l.Error = err.Error()
			return l
		}
		l.State = st.String()
	}
	l.Stopped = cuda.Stopped(pid)
	return l
}

// stateNote is what the user should know about l, with its one remedy,
// "" when there is nothing to say. A checkpoint in progress owns the
// process: resuming it under the checkpoint would corrupt the image. The
// note is printed, not returned: report.Render words its remedy as a
// failure's would read.
func stateNote(l cudaStateLine) string {
	checkpoint := l.Operation == "checkpoint"
	switch {
	case checkpoint:
		return report.Render(fmt.Sprintf("is %s: a checkpoint of it is in progress (cryo pid %d)", cmp.Or(l.State, "not answered"), l.OperationPID),
			"wait for that checkpoint to finish, it resumes or ends the process itself")
	case l.Frozen:
		return report.Render("is frozen (its cgroup is frozen, as a paused container's is), so the driver was not asked",
			"resume the container (ctr task resume, podman unpause) and ask again")
	case l.State == status.StateBusy:
		return report.Render(fmt.Sprintf("is traced by pid %d, so the driver was not asked", procfs.Tracer(l.PID)),
			"wait for that tracer (a cryo call under way, CRIU or a debugger) to let go")
	case l.Operation != "":
		return report.Render(fmt.Sprintf("is held by `cryo %s` (cryo pid %d)", l.Operation, l.OperationPID), "wait for it to finish")
	case l.State == cuda.StateCheckpointed.String() || l.State == cuda.StateLocked.String():
		// Left so by `cryo cuda suspend`, or by a checkpoint killed
		// between its suspend and its dump: recover resumes CUDA first,
		// then continues the tree, which fits both.
		return report.Render("is suspended", fmt.Sprintf("`cryo recover %d` brings it back", l.PID))
	}
	return ""
}

func (ap *app) printStateLines(lines []cudaStateLine) {
	for _, l := range lines {
		state := l.State
		if l.Stopped && state != "" {
			state += " (stopped)"
		}
		fmt.Fprintf(ap.stdout, "%d\t%s\n", l.PID, cmp.Or(state, "-\t"+l.Error))
	}
}

// lockOf is the held lock of pid's cryo run: its pid's own, or its
// container's when its cgroup names that container.
func lockOf(pid int, locks []lock.Info) (lock.Info, bool) {
	for _, l := range locks {
		if l.Held && l.PID() == pid {
			return l, true
		}
	}
	for _, l := range locks {
		if id := l.Container(); l.Held && id != "" && inContainer(pid, id) {
			return l, true
		}
	}
	return lock.Info{}, false
}

// inContainer says whether an element of pid's cgroup path names the
// container id, as runtimes name them: "ID", "cri-containerd-ID.scope",
// "libpod-ID.scope", and so on.
func inContainer(pid int, id string) bool {
	cgs, err := procfs.Cgroups(pid)
	if err != nil {
		return false
	}
	for _, cg := range cgs {
		for _, elem := range strings.Split(cg.Path, "/") {
			elem = strings.TrimSuffix(elem, ".scope")
			if elem == id || strings.HasSuffix(elem, "-"+id) {
				return true
			}
		}
	}
	return false
}
