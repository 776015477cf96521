package status

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/termtext"
)

// WriteTable prints the report for people: one row per CUDA process, then
// the cryo runs under way and the pauses whose processes are gone, each
// table only when it has rows. The warnings are the caller's to print, on
// stderr with its other messages.
func WriteTable(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tCONTAINER\tSTATE\tGPUS\tMEMORY\tOPERATION")
	for _, p := range r.Processes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.PID, dash(esc(shortID(p.Container))), esc(StateText(p)), dash(gpusText(p.GPUs)), memText(p.GPUMemory), dash(esc(operationText(p))))
	}
	if len(r.Locks) > 0 {
		fmt.Fprintln(tw, "\nLOCK HOLDER\tOPERATION\tTARGET\tLOCK FILE")
		for _, l := range r.Locks {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", l.HolderPID, dash(esc(l.Operation)), dash(esc(l.Target)), esc(l.File))
		}
	}
	if gone := gonePauses(r.Pauses); len(gone) > 0 {
		fmt.Fprintln(tw, "\nPAUSED CONTAINER\tPIDS GONE\tRECORD")
		for _, p := range gone {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", esc(p.Container), pidList(p.Processes), esc(p.File))
		}
	}
	return tw.Flush()
}

// StateText is the STATE column: the state, "(stopped)" when cryo holds
// the threads stopped (as `cryo cuda state` says it), and why for busy and
// unknown.
func StateText(p Process) string {
	if recoverable(p) {
		// Nobody holds it: a cryo was killed with it stopped, or a
		// `cryo cuda suspend` left it so. A SIGCONT alone would crash it.
		return "stopped, CUDA " + p.State + ": run cryo recover " + strconv.Itoa(p.PID)
	}
	s := p.State
	switch p.State {
	case StateBusy:
		s += " (traced by pid " + strconv.Itoa(p.TracerPID) + ")"
	case StateUnknown:
		s += " (" + cmp.Or(p.Detail, "no answer") + ")"
	}
	if p.Stopped {
		s += " (stopped)"
	}
	return s
}

// recoverable: held stopped with its GPU state away, and no cryo run or
// GPU-free pause owns it: `cryo recover` brings it back. A pause record
// owns it only while its container is frozen: a pause killed between its
// record and its freeze leaves a record, a container that runs, and the
// process held, which no `resume` gives back (there is nothing to thaw).
func recoverable(p Process) bool {
	away := p.State == cuda.StateCheckpointed.String() || p.State == cuda.StateLocked.String()
	return away && p.Stopped && !p.Frozen && p.Operation == ""
}

// operationText is the OPERATION column: the cryo run holding the
// process's lock with its pid, and "paused" when a GPU-free pause
// suspended it.
func operationText(p Process) string {
	var parts []string
	if p.Operation != "" {
		parts = append(parts, fmt.Sprintf("%s (cryo pid %d)", p.Operation, p.OperationPID))
	}
	if p.Paused {
		parts = append(parts, "paused (GPU-free)")
	}
	return strings.Join(parts, ", ")
}

// gpusText lists the GPUs by index, or by UUID when this host's inventory
// does not have them.
func gpusText(gpus []GPU) string {
	var out []string
	for _, g := range gpus {
		if g.Index >= 0 {
			out = append(out, strconv.Itoa(g.Index))
		} else {
			out = append(out, g.UUID)
		}
	}
	return strings.Join(out, ",")
}

// memText is bytes in binary units, "-" for none known.
func memText(b uint64) string {
	if b == 0 {
		return "-"
	}
	const unit = 1024
	if b < unit {
		return strconv.FormatUint(b, 10) + " B"
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTP"[exp])
}

// shortID shortens a 64-hex container id as docker ps does.
func shortID(id string) string {
	if len(id) == 64 && strings.Trim(id, "0123456789abcdef") == "" {
		return id[:12]
	}
	return id
}

// gonePauses are the pause records none of whose processes is alive: a
// process that is alive shows in the process table already.
func gonePauses(all []Pause) []Pause {
	var out []Pause
	for _, p := range all {
		anyAlive := false
		for _, pp := range p.Processes {
			anyAlive = anyAlive || pp.Alive
		}
		if !anyAlive {
			out = append(out, p)
		}
	}
	return out
}

func pidList(ps []PauseProcess) string {
	var out []string
	for _, p := range ps {
		out = append(out, strconv.Itoa(p.PID))
	}
	return dash(strings.Join(out, ","))
}

func dash(s string) string { return cmp.Or(s, "-") }

// esc keeps what other processes wrote (a lock file's line, a container
// id) from moving the terminal's cursor or recolouring it.
func esc(s string) string { return termtext.EscapeControl(s) }

func (r *Report) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}
