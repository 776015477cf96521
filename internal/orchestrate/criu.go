package orchestrate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	criu "github.com/checkpoint-restore/go-criu/v7"
	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"
)

// Log files CRIU writes into the image directory. They are left out of the
// digests (snapshot skips *.log).
const (
	DumpLog    = "criu-dump.log"
	RestoreLog = "criu-restore.log"
)

// criuLogLevel 4 is CRIU's debug level: a failed dump is diagnosed from the
// log alone, and the log costs little next to the images.
const criuLogLevel = 4

// ghostLimit is the largest deleted-but-open file a dump saves.
const ghostLimit = 256 << 20

// CRIUPath finds the CRIU binary: the configured one ($CRYO_CRIU), then
// /usr/local/sbin/criu (where a CRIU built from source lands, ahead of an
// older distribution package that may not work on this kernel), then $PATH.
func CRIUPath(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if st, err := os.Stat("/usr/local/sbin/criu"); err == nil && st.Mode()&0o111 != 0 {
		return "/usr/local/sbin/criu", nil
	}
	p, err := exec.LookPath("criu")
	if err != nil {
		return "", fmt.Errorf("%w: install CRIU 4.1 or newer (`make deps`), or set CRYO_CRIU", ErrNoCRIU)
	}
	return p, nil
}

// criuOptions are the flags a bare dump or restore passes to CRIU.
type criuOptions struct {
	ShellJob       bool
	TCPEstablished bool
	LeaveRunning   bool
	// LeaveStopped leaves the dumped tree stopped instead of killing it
	// (see Target.DumpLeavesStopped).
	LeaveStopped bool
	// Binary is the configured CRIU ($CRYO_CRIU); empty: found by CRIUPath.
	Binary string
}

func newCRIU(configured string) (*criu.Criu, error) {
	path, err := CRIUPath(configured)
	if err != nil {
		return nil, err
	}
	c := criu.MakeCriu()
	c.SetCriuPath(path)
	return c, nil
}

// baseOpts opens dir and returns the options shared by dump and restore.
// CRIU's RPC server opens the directory through our fd (/proc/PID/fd/N), so
// the file must stay open until the call returns: the caller closes it.
func baseOpts(dir, logFile string, o criuOptions) (*rpc.CriuOpts, *os.File, error) {
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

// criuDump dumps the process tree rooted at pid into dir. Without
// LeaveRunning CRIU kills the tree once the images are written, or with
// LeaveStopped leaves it stopped; on a failed dump CRIU lets the tree run
// on.
func criuDump(ctx context.Context, pid int, dir string, o criuOptions) error {
	c, err := newCRIU(o.Binary)
	if err != nil {
		return err
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
	if err := c.Dump(opts, criu.NoNotify{}); err != nil {
		return &CRIUError{Op: "dump", LogPath: filepath.Join(dir, DumpLog), Err: err}
	}
	return nil
}

// criuRestore restores the tree in dir, detached: with rst_sibling the
// restored root becomes a child of this process rather than of CRIU, and
// when this process exits the kernel re-parents it to init (or to the
// nearest child subreaper). It returns the root's pid. CRIU is killed when
// ctx ends (the restore's deadline); what it had restored by then is the
// caller's to kill (killRestoredTree).
func criuRestore(ctx context.Context, dir string, o criuOptions) (int, error) {
	path, err := CRIUPath(o.Binary)
	if err != nil {
		return 0, err
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
		return 0, &CRIUError{Op: "restore", LogPath: filepath.Join(dir, RestoreLog), Err: err}
	}
	return pid, nil
}
