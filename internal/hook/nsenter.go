package hook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// Nsenter is an Exec for a process tree that no runtime manages (the CLI's
// bare tree): the command runs in pid's namespaces, with its root and
// working directory, as its user and groups, through nsenter(1), which
// drops every capability with the change to a non-root user. It is run
// with the privileges pid has, never more, as long as pid is not root; a
// root pid's hook runs as root, as the tree itself does.
func Nsenter(ctx context.Context, pid int, argv []string) (int, []byte, error) {
	uid, gid, err := ids(pid)
	if err != nil {
		return 0, nil, err
	}
	args := []string{"--target", strconv.Itoa(pid), "--all", "--root", "--wd",
		"--setuid", strconv.Itoa(uid), "--setgid", strconv.Itoa(gid), "--"}
	cmd := exec.CommandContext(ctx, "nsenter", append(args, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own group, so that a terminal's Ctrl-C is cryo's to decide.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// At the deadline the whole group goes: nsenter forks the command
	// into the pid namespace, and killing nsenter alone would leave it.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return ee.ExitCode(), out.Bytes(), nil
	}
	return 0, out.Bytes(), err
}

// ids are pid's effective user and group.
func ids(pid int) (uid, gid int, err error) {
	u, uok := procfs.StatusField(pid, "Uid")
	g, gok := procfs.StatusField(pid, "Gid")
	uf, gf := strings.Fields(u), strings.Fields(g)
	if !uok || !gok || len(uf) < 2 || len(gf) < 2 {
		return 0, 0, fmt.Errorf("%w: read pid %d's user: no Uid or Gid in its status", ErrFailed, pid)
	}
	// The effective ids: what the process acts as.
	if uid, err = strconv.Atoi(uf[1]); err == nil {
		gid, err = strconv.Atoi(gf[1])
	}
	return uid, gid, err
}
