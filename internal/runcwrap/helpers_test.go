package runcwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/confine/outcome"
)

// TestExitCodeOfRunc: cryo-runc exits with runc's own status when runc is what failed, through
// any wrapping the orchestration adds, and 1 for anything else.
func TestExitCodeOfRunc(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{&exitError{3}, 3},
		{fmt.Errorf("step dump: %w", &exitError{137}), 137},
		{&exitError{0}, 1},
		{errors.New("no runc"), 1},
		{nil, 1},
	} {
		if got := exitCode(context.Background(), c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", &exitError{2}), ErrRuncFailed) {
		t.Error("a wrapped exitError is not ErrRuncFailed")
	}
}

// CRIU's logs are in --work-path when given, else in the image path; the
// state directory is --root's, else runc's default for root.
func TestWhereRuncWrites(t *testing.T) {
	if got := workDir(crOpts{imagePath: "/i", workPath: "/w"}); got != "/w" {
		t.Errorf("workDir with --work-path: %q", got)
	}
	if got := workDir(crOpts{imagePath: "/i"}); got != "/i" {
		t.Errorf("workDir without --work-path: %q", got)
	}
	w := &wrapper{cmd: parseCmdline([]string{"--root=/r", "restore", "c"})}
	if got := w.runcRoot(); got != "/r" {
		t.Errorf("runcRoot with --root=/r: %q", got)
	}
	if os.Geteuid() == 0 {
		t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
		w = &wrapper{cmd: parseCmdline([]string{"restore", "c"})}
		if got := w.runcRoot(); got != "/run/runc" {
			t.Errorf("runcRoot as root: %q, want /run/runc whatever XDG_RUNTIME_DIR says", got)
		}
	}
}

// A failed runc restore whose tasks the outcome check killed reports the
// check's refusal (runc only saw CRIU go away), wrapping runc's error; a
// passed verdict or none leaves runc's error as it is.
func TestOutcomeErr(t *testing.T) {
	runcErr := &exitError{1}
	bundle := t.TempDir()
	o := crOpts{id: "c", bundle: bundle}
	if got := outcomeErr(o, runcErr); got != runcErr {
		t.Errorf("no verdict: %v, want runc's error", got)
	}
	if err := outcome.WriteVerdict(bundle, outcome.Verdict{Passed: true}); err != nil {
		t.Fatal(err)
	}
	if got := outcomeErr(o, runcErr); got != runcErr {
		t.Errorf("passed verdict: %v, want runc's error", got)
	}
	if got := outcomeErr(o, nil); got != nil {
		t.Errorf("passed verdict, runc succeeded: %v", got)
	}
	if err := outcome.WriteVerdict(bundle, outcome.Verdict{Error: "read the spec: no config.json", Killed: true}); err != nil {
		t.Fatal(err)
	}
	got := outcomeErr(o, runcErr)
	if got == nil || !errors.Is(got, ErrRuncFailed) || !errors.Is(got, outcome.ErrRefused) || !strings.Contains(got.Error(), "no config.json") || !strings.Contains(got.Error(), "runc restore failed as it should") {
		t.Errorf("failed verdict: %v; want the check's refusal wrapping runc's error", got)
	}
	if got := outcomeErr(o, nil); got == nil || !strings.Contains(got.Error(), "no config.json") {
		t.Errorf("failed verdict, runc succeeded: %v; want the check's refusal", got)
	}
}

// cryo-runc logs where runc logs: --log's file (never quiet there), else
// stderr, quiet on success unless --debug; /dev/stderr is stderr.
func TestNewLogger(t *testing.T) {
	file := filepath.Join(t.TempDir(), "runc.log")
	l := newLogger(parseCmdline([]string{"--log", file, "--log-format", "json", "checkpoint", "c"}))
	l.info("checkpoint of %s done", "c")
	data, _ := os.ReadFile(file)
	if !l.json || l.quiet || !strings.Contains(string(data), `"msg":"checkpoint of c done"`) {
		t.Errorf("--log file: json %v quiet %v, file %q", l.json, l.quiet, data)
	}
	if l := newLogger(parseCmdline([]string{"checkpoint", "c"})); l.w != os.Stderr || !l.quiet || l.json {
		t.Errorf("no --log: %+v, want quiet text on stderr", l)
	}
	if l := newLogger(parseCmdline([]string{"--debug", "--log", "/dev/stderr", "checkpoint", "c"})); l.w != os.Stderr || l.quiet {
		t.Errorf("--debug --log /dev/stderr: %+v, want stderr, not quiet", l)
	}
}
