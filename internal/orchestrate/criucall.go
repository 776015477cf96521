package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cryo-gpu/cryo/internal/criu"
)

// CRIU as the orchestration calls it: internal/criu runs it; here the
// binary is found (ErrNoCRIU), a failed call becomes a CRIUError, and the
// version and feature gates are applied to the configured CRIU.

// Log files CRIU writes into the image directory (see criu.DumpLog).
const (
	DumpLog    = criu.DumpLog
	RestoreLog = criu.RestoreLog
)

// CRIUPath finds the CRIU binary: the configured one ($CRYO_CRIU), then
// /usr/local/sbin/criu, then $PATH (see criu.Locate).
func CRIUPath(configured string) (string, error) {
	p, err := criu.Locate(configured)
	if err != nil {
		return "", fmt.Errorf("%w: install CRIU 4.1 or newer (`make deps`), or set CRYO_CRIU", ErrNoCRIU)
	}
	return p, nil
}

// ProbeCRIU asks the configured CRIU for its version (see criu.Probe).
func ProbeCRIU(configured string) (criu.Info, error) {
	path, err := CRIUPath(configured)
	if err != nil {
		return criu.Info{Kernel: criu.KernelRelease()}, err
	}
	return criu.Probe(path)
}

// criuOptions are the flags of a bare dump or restore, and the configured
// CRIU ($CRYO_CRIU; empty: found by CRIUPath).
type criuOptions struct {
	criu.Options
	Binary string
}

// criuDump dumps the tree rooted at pid into dir (see criu.Dump).
func criuDump(ctx context.Context, pid int, dir string, o criuOptions) error {
	path, err := CRIUPath(o.Binary)
	if err != nil {
		return err
	}
	return criuError(criu.Dump(ctx, path, pid, dir, o.Options))
}

// criuRestore restores the tree in dir, detached (see criu.Restore); what
// it had restored when ctx ended is the caller's to kill
// (killRestoredTree).
func criuRestore(ctx context.Context, dir string, o criuOptions) (int, error) {
	path, err := CRIUPath(o.Binary)
	if err != nil {
		return 0, err
	}
	pid, err := criu.Restore(ctx, path, dir, o.Options)
	return pid, criuError(err)
}

// criuError turns a call that CRIU failed into a CRIUError, whose message
// quotes the cause from CRIU's log.
func criuError(err error) error {
	var ce *criu.CallError
	if errors.As(err, &ce) {
		return &CRIUError{Op: ce.Op, LogPath: ce.LogPath, Err: ce.Err}
	}
	return err
}

// criuCheck is the configured CRIU ($CRYO_CRIU) as a checkpoint checks
// it before anything is touched.
type criuCheck struct {
	binary string
	log    *slog.Logger
}

// version refuses a checkpoint with a CRIU known to fail on this kernel,
// and returns its version for the manifest. A CRIU that cannot tell its
// version is left to fail on its own, with its log; its version is "".
func (c criuCheck) version() (string, error) {
	info, err := ProbeCRIU(c.binary)
	if err != nil {
		c.log.Debug("CRIU version unknown; not checked", "error", err)
		return "", nil
	}
	return info.VersionString(), info.Check()
}

// seizeStopped refuses, before any CUDA process is suspended, the
// checkpoint of a container whose dump freezes its cgroup with a CRIU
// that cannot seize its held CUDA processes (see criu.CheckSeizeStopped).
func (c criuCheck) seizeStopped(ctx context.Context) error {
	path, err := CRIUPath(c.binary)
	if err != nil {
		return err
	}
	return criu.CheckSeizeStopped(ctx, path)
}

// restoreTCP counts the established TCP connections of the checkpoint in
// dir, logging that the restore keeps them. The directory was read by
// CheckRestore already: an error here leaves the count at zero, and CRIU
// reports what is wrong.
func restoreTCP(log *slog.Logger, id, dir string) int {
	n, _ := criu.EstablishedTCP(dir)
	if n > 0 {
		log.Info("checkpoint holds established TCP connections: restoring with tcp-established", "id", id, "connections", n)
	}
	return n
}
