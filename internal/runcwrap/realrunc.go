package runcwrap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cryo-gpu/cryo/internal/config"
)

// errNoRunc: the real runc could not be found.
var errNoRunc = errors.New("real runc not found")

// realRunc returns the path of the OCI runtime cryo-runc wraps: the
// configured one ($CRYO_RUNC), else the first `runc` on PATH that is not
// cryo-runc itself (cryo-runc may be installed as `runc`, and calling
// itself would loop forever).
func realRunc(cfg config.Config) (string, error) {
	if p := cfg.Runc; p != "" {
		full, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("%w: CRYO_RUNC=%s: %v (set CRYO_RUNC to runc's absolute path)", errNoRunc, p, err)
		}
		if isSelf(full) {
			return "", fmt.Errorf("%w: CRYO_RUNC=%s is cryo-runc itself (point it at the real runc)", errNoRunc, p)
		}
		return full, nil
	}
	path := config.Lookup(cfg.Environ, "PATH")
	if path == "" {
		// Podman runs some runtime commands with no PATH at all.
		path = config.DefaultPath
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, "runc")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 && !isSelf(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w on PATH (install runc, or set CRYO_RUNC in %s)", errNoRunc, config.DefaultEnvFile)
}

// isSelf reports whether p is the running executable.
func isSelf(p string) bool {
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		return false
	}
	st, err := os.Stat(p)
	return err == nil && os.SameFile(self, st)
}

// execRunc replaces this process with runc, so that stdio, inherited file
// descriptors, the console socket, signals and the exit status are exactly
// runc's. It returns only on failure.
func (w *wrapper) execRunc() error {
	err := syscall.Exec(w.runc, append([]string{w.runc}, w.cmd.argv()...), w.runcEnv())
	return fmt.Errorf("exec %s: %w", w.runc, err)
}

// runcEnv is cryo-runc's environment with $CRYO_CRIU's directory first on
// PATH, where runc looks for criu, and CRIU's seccomp filter directory.
func (w *wrapper) runcEnv() []string {
	return config.WithSeccompDir(config.CRIUFirst(w.cfg.Environ, w.cfg.CRIU))
}

// runcCmd is runc as a child with this process's stdio and cryo-runc's environment
// (plus extraEnv). Inherited descriptors that are not close-on-exec
// (conmon's pipes, a console socket's peer) reach runc as well.
func (w *wrapper) runcCmd(extraEnv ...string) *exec.Cmd {
	cmd := exec.Command(w.runc, w.cmd.argv()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(append([]string(nil), w.runcEnv()...), extraEnv...)
	// Its own process group, with runc's CRIU in it: a signal to the
	// caller's group (Ctrl-C on `podman container checkpoint`, a
	// supervisor stopping the job) reaches cryo-runc alone, which decides
	// what it means (forwards it, or finishes the dump and rolls back). A
	// group, not a session: a shell job's runc keeps the terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// runRunc runs runc as a child and returns its exit status.
func (w *wrapper) runRunc(extraEnv ...string) (int, error) {
	cmd := w.runcCmd(extraEnv...)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("run %s: %w", w.runc, err)
	}
	return waitExit(cmd), nil
}

// runRuncToEnd runs runc as a child to its end, passing it no signal: a
// `runc checkpoint` whose CRIU is stopped mid-dump loses the workload. An
// interrupt cancels the orchestration's context instead, whose runner
// rolls back once the dump has ended. No Pdeathsig either, for the same
// reason: a cryo-runc that dies leaves runc to end its dump.
func (w *wrapper) runRuncToEnd(extraEnv ...string) (int, error) {
	cmd := w.runcCmd(extraEnv...)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("run %s: %w", w.runc, err)
	}
	err := cmd.Wait()
	return statusOf(cmd, err), nil
}

// forwarded are the signals passed on to a runc child, as if the caller had
// signalled runc itself (runc forwards them to a foreground container).
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// waitExit waits for a started runc, forwarding signals, and returns its
// exit status (128+signal if it was killed, as a shell reports it).
func waitExit(cmd *exec.Cmd) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			return statusOf(cmd, err)
		}
	}
}

func statusOf(cmd *exec.Cmd, err error) int {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		return 128 + int(ws.Signal())
	case cmd.ProcessState != nil:
		return cmd.ProcessState.ExitCode()
	case err != nil:
		return 1
	}
	return 0
}
