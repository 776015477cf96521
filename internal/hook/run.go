package hook

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// The hooks' names, for messages and the steps that run them.
const (
	PreCheckpoint = "pre-checkpoint"
	PostRestore   = "post-restore"
)

// Sentinels of a failed hook; test with errors.Is.
var (
	// ErrFailed: the hook answered, and not with success (an HTTP status
	// outside 2xx, a non-zero exit), or could not be run at all.
	ErrFailed = errors.New("hook failed")
	// ErrTimeout: the hook did not answer within its deadline.
	ErrTimeout = errors.New("hook timed out")
	// ErrNoExec: an exec hook where the front end has no way to run a
	// command in the container.
	ErrNoExec = errors.New("exec hooks are not supported here")
)

// Answer is what a hook said: an HTTP status and the start of its body,
// or a command's exit status and the end of its output.
type Answer struct {
	Status int // HTTP status, or exit status
	Text   string
	Took   time.Duration
}

func (a Answer) String() string {
	return fmt.Sprintf("%d %q", a.Status, a.Text)
}

// Exec runs argv inside the container of pid, with a deadline in ctx, and
// returns its exit status and combined output; an error only when it
// could not be run (or was killed at the deadline).
type Exec func(ctx context.Context, pid int, argv []string) (status int, output []byte, err error)

// Error is a failed hook: which one, what it was, what it answered, and
// why it failed (ErrFailed or ErrTimeout, with the cause).
type Error struct {
	Name   string // PreCheckpoint or PostRestore
	Spec   Spec
	Answer *Answer // nil when it never answered
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s hook %q", e.Name, e.Spec.Text)
	if e.Answer != nil {
		fmt.Fprintf(&b, " answered %s", e.Answer)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Run runs the hook s of the container whose process pid is one of its
// own (its network namespace is the container's), with s's deadline;
// exec runs an exec hook (nil refuses one with ErrNoExec).
func Run(ctx context.Context, name string, s Spec, pid int, exec Exec) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	start := time.Now()
	var a Answer
	var err error
	switch s.Kind {
	case KindHTTP:
		a, err = httpIn(ctx, pid, s)
	case KindExec:
		a, err = runExec(ctx, s, pid, exec)
	default:
		err = fmt.Errorf("kind %d: %w", s.Kind, ErrSyntax)
	}
	a.Took = time.Since(start)
	if err == nil {
		return a, nil
	}
	e := &Error{Name: name, Spec: s, Err: err}
	if a.Status != 0 {
		e.Answer = &a
	}
	switch {
	case timedOut(ctx, err) && !errors.Is(err, ErrFailed):
		e.Err = fmt.Errorf("%w after %s: %v", ErrTimeout, s.Timeout, err)
	case !errors.Is(err, ErrFailed) && !errors.Is(err, ErrNoExec):
		e.Err = fmt.Errorf("%w: %v", ErrFailed, err)
	}
	return a, e
}

// timedOut: the deadline passed, as the context or the connection's own
// deadline (set to the same instant, it may fire first) reports it.
func timedOut(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
}

// runExec runs an exec hook: exit status 0 is a success.
func runExec(ctx context.Context, s Spec, pid int, exec Exec) (Answer, error) {
	if exec == nil {
		return Answer{}, ErrNoExec
	}
	status, out, err := exec(ctx, pid, s.Argv)
	a := Answer{Status: status, Text: tail(string(out), 512)}
	if err != nil {
		return a, err
	}
	if status != 0 {
		return a, fmt.Errorf("%w: exit status %d", ErrFailed, status)
	}
	return a, nil
}

// tail is the last n bytes of s, trimmed: where a command says why it failed.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
