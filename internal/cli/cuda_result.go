package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/cuda"
)

// addSetOutputFlags are the output flags of cuda suspend and resume:
// --json for scripts, -q for `cryo cuda resume $(cryo cuda suspend -q …)`.
func addSetOutputFlags(cmd *cobra.Command) {
	addFormatFlags(cmd, "{{.pid}} {{.state_before}} {{.state_after}}")
	cmd.Flags().BoolP("quiet", "q", false, "no progress on stderr; only the pids handled on stdout, one a line")
}

// cudaSetResult is one pid of `cryo cuda suspend|resume --json`.
type cudaSetResult struct {
	PID    int    `json:"pid"`
	Before string `json:"state_before"`
	After  string `json:"state_after"`
	// Bytes is the GPU memory the process held: before a suspend, after
	// a resume (a suspended process holds none NVML can see); 0 unknown.
	Bytes uint64 `json:"bytes"`
	// Seconds is the whole call's: the pids go through the driver's
	// phases together, so no pid has a time of its own.
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// cudaSetResults collects the document while the call runs.
type cudaSetResults struct {
	verb  string
	lines []cudaSetResult
}

// beginCUDAResults records each pid's state before the call, and for a
// suspend the memory it holds now.
func beginCUDAResults(ctx context.Context, d *cuda.Driver, pids []int, verb string) *cudaSetResults {
	r := &cudaSetResults{verb: verb, lines: make([]cudaSetResult, 0, len(pids))}
	for _, pid := range pids {
		r.lines = append(r.lines, cudaSetResult{PID: pid, Before: stateText(ctx, d, pid)})
	}
	if verb == "suspend" {
		r.fillBytes(ctx, d)
	}
	return r
}

// finish records the states after the call, prints the document and
// returns err: a pid not left in the state asked for carries the error.
func (r *cudaSetResults) finish(ctx context.Context, ap *app, d *cuda.Driver, took time.Duration, err error) error {
	want := cuda.StateCheckpointed.String()
	if r.verb == "resume" {
		want = cuda.StateRunning.String()
		r.fillBytes(ctx, d)
	}
	for i := range r.lines {
		l := &r.lines[i]
		l.After, l.Seconds = stateText(ctx, d, l.PID), took.Seconds()
		if err != nil && l.After != want {
			l.Error = err.Error()
		}
	}
	if perr := ap.printJSON(ap.stdout, r.lines); perr != nil && err == nil {
		return perr
	}
	return err
}

func (r *cudaSetResults) fillBytes(ctx context.Context, d *cuda.Driver) {
	inv, err := d.Inventory(ctx)
	if err != nil {
		return
	}
	for i := range r.lines {
		v, err := inv.Describe(r.lines[i].PID)
		if err != nil {
			continue
		}
		for _, g := range v.GPUs {
			r.lines[i].Bytes += g.Memory
		}
	}
}

// stateText is pid's driver state, "unknown" when the driver cannot say.
func stateText(ctx context.Context, d *cuda.Driver, pid int) string {
	st, err := d.State(ctx, pid)
	if err != nil {
		return "unknown"
	}
	return st.String()
}
