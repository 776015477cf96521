// Package criu runs CRIU for cryo: a dump or a detached restore of a
// process tree over CRIU's RPC, the version and feature gates a kernel
// asks of CRIU, the CRIU configuration file runc reads from a bundle, the
// facts of a dump in progress, and the reading of its logs after a failure
// (the cause line, the refusals an option lifts). It knows nothing of the
// orchestration's steps: the caller finds the binary and words the errors
// it reports.
package criu

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"

	gocriu "github.com/checkpoint-restore/go-criu/v7"
	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"
)

// Log files CRIU writes into the image directory. They are left out of the
// digests (internal/manifest/digest skips *.log).
const (
	DumpLog    = "criu-dump.log"
	RestoreLog = "criu-restore.log"
)

// criuLogLevel 4 is CRIU's debug level: a failed dump is diagnosed from the
// log alone, and the log costs little next to the images.
const criuLogLevel = 4

// ghostLimit is the largest deleted-but-open file a dump saves.
const ghostLimit = 256 << 20

// Locate finds the CRIU binary: the configured one ($CRYO_CRIU), then
// /usr/local/sbin/criu (where a CRIU built from source lands, ahead of an
// older distribution package that may not work on this kernel), then $PATH.
// The caller words the error of a host without CRIU.
func Locate(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if st, err := os.Stat("/usr/local/sbin/criu"); err == nil && st.Mode()&0o111 != 0 {
		return "/usr/local/sbin/criu", nil
	}
	return exec.LookPath("criu")
}

// CallError is a CRIU call that CRIU itself failed: its log, LogPath, says
// why. Errors before the call (no image directory) are returned as they are.
type CallError struct {
	Op      string // "dump", "restore"
	LogPath string
	Err     error
}

func (e *CallError) Error() string { return "criu " + e.Op + ": " + e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// ErrNoBinary: Dump or Restore was called without a CRIU binary.
var ErrNoBinary = errors.New("no CRIU binary given")

// Options are the flags a bare dump or restore passes to CRIU.
type Options struct {
	ShellJob       bool
	TCPEstablished bool
	LeaveRunning   bool
	// LeaveStopped leaves the dumped tree stopped instead of killing it:
	// the caller kills it once the checkpoint is durable, or continues it.
	LeaveStopped bool
}

// newCRIU is go-criu's client of the binary at path.
func newCRIU(path string) (*gocriu.Criu, error) {
	if path == "" {
		return nil, ErrNoBinary
	}
	c := gocriu.MakeCriu()
	c.SetCriuPath(path)
	return c, nil
}

// baseOpts opens dir and returns the options shared by dump and restore.
// CRIU's RPC server opens the directory through our fd (/proc/PID/fd/N), so
// the file must stay open until the call returns: the caller closes it.
func baseOpts(dir, logFile string, o Options) (*rpc.CriuOpts, *os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	return &rpc.CriuOpts{
		ImagesDirFd:    proto.Int32(int32(f.Fd())),
		LogLevel:       proto.Int32(criuLogLevel),
		LogFile:        proto.String(logFile),
		ShellJob:       proto.Bool(o.ShellJob),
		TcpEstablished: proto.Bool(o.TCPEstablished),
		// A file deleted while still open (a "ghost") is saved whole;
		// CRIU's default limit of 1 MiB refuses, for one, the deleted
		// /dev/shm file an NCCL rank on sockets keeps.
		GhostLimit: proto.Uint32(ghostLimit),
	}, f, nil
}

// Dump dumps the process tree rooted at pid into dir with the CRIU at
// path. Without LeaveRunning CRIU kills the tree once the images are
// written, or with LeaveStopped leaves it stopped; on a failed dump CRIU
// lets the tree run on. CRIU runs in a session of its own and to its end:
// neither ctx nor a signal to this process's group stops it (see swrk).
func Dump(ctx context.Context, path string, pid int, dir string, o Options) error {
	if path == "" {
		return ErrNoBinary
	}
	opts, f, err := baseOpts(dir, DumpLog, o)
	if err != nil {
		return err
	}
	defer f.Close()
	opts.Pid = proto.Int32(int32(pid))
	opts.LeaveRunning = proto.Bool(o.LeaveRunning)
	if o.LeaveStopped && !o.LeaveRunning {
		opts.LeaveStopped = proto.Bool(true)
	}
	if err := swrkDump(ctx, path, opts); err != nil {
		return &CallError{Op: "dump", LogPath: filepath.Join(dir, DumpLog), Err: err}
	}
	return nil
}

// Restore restores the tree in dir, detached: with rst_sibling the
// restored root becomes a child of this process rather than of CRIU, and
// when this process exits the kernel re-parents it to init (or to the
// nearest child subreaper). It returns the root's pid. CRIU is killed when
// ctx ends (the restore's deadline); what it had restored by then is the
// caller's to kill.
func Restore(ctx context.Context, path, dir string, o Options) (int, error) {
	if path == "" {
		return 0, ErrNoBinary
	}
	opts, f, err := baseOpts(dir, RestoreLog, o)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	opts.RstSibling = proto.Bool(true)
	// A shell job goes onto the terminal and into the session of CRIU's
	// stdin, which must be ours (see swrkRestore).
	pid, err := swrkRestore(ctx, path, opts, o.ShellJob)
	if err != nil {
		return 0, &CallError{Op: "restore", LogPath: filepath.Join(dir, RestoreLog), Err: err}
	}
	return pid, nil
}
