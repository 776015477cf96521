package hook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// Nsenter is an Exec for a process tree that no runtime manages (the CLI's
// bare tree): the command runs in pid's cgroups (so their limits bind it),
// in its namespaces, with its root and working directory, as its user and
// group, through nsenter(1), which drops every capability with the change
// to a non-root user. It is run with the privileges pid has, never more,
// as long as pid is not root; a root pid's hook runs as root, as the tree
// itself does.
func Nsenter(ctx context.Context, pid int, argv []string) (int, []byte, error) {
	uid, gid, err := ids(pid)
	if err != nil {
		return 0, nil, err
	}
	procs := cgroupProcs(pid)
	// A shell of the host joins the cgroups first, then becomes nsenter:
	// everything the hook starts is born in them.
	args := append([]string{"-c", joinThenExec, "sh", strconv.Itoa(len(procs))}, procs...)
	args = append(args, "nsenter", "--target", strconv.Itoa(pid), "--all", "--root", "--wd",
		"--setuid", strconv.Itoa(uid), "--setgid", strconv.Itoa(gid), "--")
	cmd := exec.CommandContext(ctx, "/bin/sh", append(args, argv...)...)
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

// joinThenExec writes its own pid into the first $1 files after it (the
// cgroup.procs of the target's cgroups), then executes the rest.
const joinThenExec = `n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"`

// cgroupProcs are the cgroup.procs files of pid's cgroups, where this host
// mounts their hierarchies (/sys/fs/cgroup/CONTROLLERS for v1, the unified
// hierarchy at /sys/fs/cgroup/unified or /sys/fs/cgroup); a hierarchy
// mounted nowhere there is left out.
func cgroupProcs(pid int) []string {
	cgs, err := procfs.Cgroups(pid)
	if err != nil {
		return nil
	}
	var out []string
	for _, cg := range cgs {
		dirs := []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}
		if cg.ID != "0" {
			dirs = []string{filepath.Join("/sys/fs/cgroup", strings.TrimPrefix(cg.Controllers, "name="))}
		}
		for _, d := range dirs {
			f := filepath.Join(d, cg.Path, "cgroup.procs")
			if _, err := os.Stat(f); err == nil {
				out = append(out, f)
				break
			}
		}
	}
	return out
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
