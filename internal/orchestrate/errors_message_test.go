package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
	"github.com/cryo-gpu/cryo/internal/report"
)

// criuLog writes a dump log whose first lines are CRIU's harmless rlimit
// complaints, then the real cause.
func criuLog(t *testing.T, dir, cause string) string {
	t.Helper()
	p := filepath.Join(dir, DumpLog)
	log := "(00.000010) Error (criu/util.c:1711): Can't setup RLIMIT_NOFILE for self: Operation not permitted\n" +
		"(00.000020) Error (criu/cr-service.c:99): prlimit failed: Operation not permitted\n" +
		"(00.101000) Error (criu/x.c:1): " + cause + "\n" +
		"(00.102000) Error (criu/cr-dump.c:2): Dumping FAILED.\n"
	if err := os.WriteFile(p, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFailureMessages asserts the whole message of the main failures, as
// each front end's user reads it: one cause, each prefix once, one remedy
// in that front end's terms. The shim's and cryo-runc's words are theirs
// (their packages test them): here, stand-ins show that they are used.
// The CLI's words are asserted whole in TestFailureMessagesCLI.
func TestFailureMessages(t *testing.T) {
	const (
		unixSk   = "sockets: External socket is used. Consider using --ext-unix-sk option."
		tty      = "tty: Found dangling tty with sid 100 pgid 101 (pts) on peer fd 0."
		tcp      = "sockets: Connected TCP socket, consider using --tcp-established option."
		running  = "the processes were left running, CUDA untouched"
		criuHead = "checkpoint of pid 42 failed at step dump: criu dump failed: "
	)
	timeout := fmt.Errorf("suspend: %w; every process was returned to running",
		fmt.Errorf("pid 927: lock: %w", fmt.Errorf("cuda lock pid 927: no answer within 10s, helper killed (the GPU work did not drain, or the process is stopped, or frozen and needs a thaw): %w", cuda.ErrTimeout)))
	words := func(front string) FrontEnd {
		w := FrontEnd{}
		for k, name := range map[report.Key]string{criu.RefusedUnixSocket: "RemedyUnixSocket", criu.RefusedTerminal: "RemedyTerminal", criu.RefusedTCP: "RemedyTCP", RemedyLockTimeout: "RemedyLockTimeout"} {
			w[k] = front + " words for " + name
		}
		return w
	}
	shimWords, runcWords := words("shim"), words("runc")
	cases := []struct {
		name  string
		front FrontEnd
		step  StepName
		cause string // a CRIU log line; empty: err
		err   error
		want  string // the message, with LOG for the log's path
	}{
		{"unix socket/shim", shimWords, StepDump, unixSk, nil, criuHead + unixSk + " (CRIU log: LOG); " + running + "; remedy: shim words for RemedyUnixSocket"},
		{"unix socket/runc", runcWords, StepDump, unixSk, nil, criuHead + unixSk + " (CRIU log: LOG); " + running + "; remedy: runc words for RemedyUnixSocket"},
		{"tty/shim", shimWords, StepDump, tty, nil, criuHead + tty + " (CRIU log: LOG); " + running + "; remedy: shim words for RemedyTerminal"},
		{"tty/runc", runcWords, StepDump, tty, nil, criuHead + tty + " (CRIU log: LOG); " + running + "; remedy: runc words for RemedyTerminal"},
		{"tcp/shim", shimWords, StepDump, tcp, nil, criuHead + tcp + " (CRIU log: LOG); " + running + "; remedy: shim words for RemedyTCP"},
		{"tcp/runc", runcWords, StepDump, tcp, nil, criuHead + tcp + " (CRIU log: LOG); " + running + "; remedy: runc words for RemedyTCP"},
		{"lock timeout/shim", shimWords, StepSuspend, "", timeout, "checkpoint of pid 42 failed at step suspend: pid 927: lock: cuda lock pid 927: no answer within 10s, helper killed (the GPU work did not drain, or the process is stopped, or frozen and needs a thaw): CUDA driver call timed out; every process was returned to running; " + running + "; remedy: shim words for RemedyLockTimeout"},
		{"lock timeout/runc", runcWords, StepSuspend, "", timeout, "checkpoint of pid 42 failed at step suspend: pid 927: lock: cuda lock pid 927: no answer within 10s, helper killed (the GPU work did not drain, or the process is stopped, or frozen and needs a thaw): CUDA driver call timed out; every process was returned to running; " + running + "; remedy: runc words for RemedyLockTimeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err, log := tc.err, ""
			if tc.cause != "" {
				log = criuLog(t, dir, tc.cause)
				err = &CRIUError{Op: "dump", LogPath: log, Err: errors.New("operation failed (msg:criu failed err:0)")}
			}
			c := newCheckpoint(New(testConfig, WithFrontEnd(tc.front)).env(), Target{ID: "pid 42"}, dir, false, nil)
			got := c.runner(nil).fail(context.Background(), tc.step, err).Error()
			if want := strings.ReplaceAll(tc.want, "LOG", log); got != want {
				t.Errorf("message\n got: %s\nwant: %s", got, want)
			}
			if n := strings.Count(got, "remedy:"); n != 1 {
				t.Errorf("%d remedies in %q", n, got)
			}
		})
	}
}

// A StepError around a StepError of the same run says its prefix once, and
// a cause with its own remedy gives the one remedy.
func TestStepErrorOnce(t *testing.T) {
	inner := &report.StepError{Op: "checkpoint", ID: "pid 7", Step: StepSuspend, Err: errors.New("suspend: pid 7: lock: busy"), Remedy: "wait"}
	outer := &report.StepError{Op: "checkpoint", ID: "pid 7", Step: StepSuspend, Err: fmt.Errorf("checkpoint: %w", inner), Outcome: "the processes were left running"}
	want := "checkpoint of pid 7 failed at step suspend: pid 7: lock: busy; the processes were left running; remedy: wait"
	if got := outer.Error(); got != want {
		t.Errorf("nested:\n got: %s\nwant: %s", got, want)
	}
	pe := &precheck.Error{Err: precheck.ErrShellJob, Detail: "pid 7 (sh) has its stdin on the terminal /dev/pts/3", Remedy: "add --shell-job (and give it at restore too)"}
	se := &report.StepError{Op: "checkpoint", ID: "pid 7", Step: StepPrepare, Err: pe, Outcome: "nothing was checkpointed", Remedy: "check the pid"}
	want = "checkpoint of pid 7 failed at step prepare: process tree attached to a terminal: pid 7 (sh) has its stdin on the terminal /dev/pts/3; nothing was checkpointed; remedy: add --shell-job (and give it at restore too)"
	if got := se.Error(); got != want {
		t.Errorf("remedied cause:\n got: %s\nwant: %s", got, want)
	}
}
