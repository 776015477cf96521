package orchestrate_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/words"
)

// TestFailureMessagesCLI is TestFailureMessages for a user of the cryo
// CLI, in the CLI's own words (internal/words), which the CLI passes
// as its front end.
func TestFailureMessagesCLI(t *testing.T) {
	const (
		unixSk   = "sockets: External socket is used. Consider using --ext-unix-sk option."
		tty      = "tty: Found dangling tty with sid 100 pgid 101 (pts) on peer fd 0."
		tcp      = "sockets: Connected TCP socket, consider using --tcp-established option."
		running  = "the processes were left running, CUDA untouched"
		criuHead = "checkpoint of pid 42 failed at step dump: criu dump failed: "
	)
	timeout := fmt.Errorf("suspend: %w; every process was returned to running",
		fmt.Errorf("pid 927: lock: %w", fmt.Errorf("cuda lock pid 927: no answer within 10s, helper killed (the GPU work did not drain, or the process is stopped, or frozen and needs a thaw): %w", cuda.ErrTimeout)))
	cases := []struct {
		name  string
		step  orchestrate.StepName
		cause string // a CRIU log line; empty: err
		err   error
		want  string // the message, with LOG for the log's path
	}{
		{"unix socket/cli", orchestrate.StepDump, unixSk, nil, criuHead + unixSk + " (CRIU log: LOG); " + running + "; remedy: checkpoint the process at the other end of the unix socket in the same tree, or close the socket first"},
		{"tty/cli", orchestrate.StepDump, tty, nil, criuHead + tty + " (CRIU log: LOG); " + running + "; remedy: add --shell-job (and give it at restore too)"},
		{"tcp/cli", orchestrate.StepDump, tcp, nil, criuHead + tcp + " (CRIU log: LOG); " + running + "; remedy: for the established TCP connection, checkpoint with `cryo checkpoint --tcp-established`; the restore keeps the connections by itself"},
		{"lock timeout/cli", orchestrate.StepSuspend, "", timeout, "checkpoint of pid 42 failed at step suspend: pid 927: lock: cuda lock pid 927: no answer within 10s, helper killed (the GPU work did not drain, or the process is stopped, or frozen and needs a thaw): CUDA driver call timed out; every process was returned to running; " + running + "; remedy: retry with a longer --lock-timeout once the GPU work can pause; if it times out again, run `cryo doctor`"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err, log := tc.err, ""
			if tc.cause != "" {
				log = orchestrate.CRIULog(t, dir, tc.cause)
				err = &orchestrate.CRIUError{Op: "dump", LogPath: log, Err: errors.New("operation failed (msg:criu failed err:0)")}
			}
			o := orchestrate.New(orchestrate.TestConfig, orchestrate.WithFrontEnd(words.Remedies))
			got := orchestrate.CheckpointFailure(o, "pid 42", dir, tc.step, err).Error()
			if want := strings.ReplaceAll(tc.want, "LOG", log); got != want {
				t.Errorf("message\n got: %s\nwant: %s", got, want)
			}
			if n := strings.Count(got, "remedy:"); n != 1 {
				t.Errorf("%d remedies in %q", n, got)
			}
		})
	}
}
