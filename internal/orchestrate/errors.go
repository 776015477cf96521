package orchestrate

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/report"
)

// StepName names one step of a checkpoint or restore: an entry of a
// sequence's table, an Event's step, a StepError's Step. It is not
// manifest.Step, which is one step as a checkpoint's manifest records it
// (its name, seconds and error).
type StepName string

// The steps, in the order a checkpoint or restore takes them: StepName
// values, untyped so that they also fill the Step field of a StepError.
const (
	StepPrepare   = "prepare"   // bare process: check the pid and the image directory
	StepLock      = "lock"      // take the target's lock: one checkpoint or restore at a time
	StepThaw      = "thaw"      // unfreeze the cgroup: the driver hangs on frozen threads
	StepFind      = "find"      // find the CUDA processes of the target
	StepInventory = "inventory" // the GPUs and driver, before the suspend
	StepSuspend   = "suspend"   // lock and checkpoint CUDA
	StepManifest  = "manifest"  // write the GPU manifest into the image directory
	StepDump      = "dump"      // the front end's dump: runc checkpoint or CRIU
	StepResume    = "resume"    // restore and unlock CUDA
	StepDigests   = "digests"   // sha256 of every image file
	StepRollback  = "rollback"  // resume CUDA after a failed checkpoint
	StepVerify    = "verify"    // restore: manifest, digests and host check
	StepConfine   = "confine"   // restore: the checkpoint claims no right the new spec does not grant
	StepComplete  = "complete"  // hash a checkpoint whose run was interrupted after its dump
	StepRestore   = "restore"   // restore: the front end's restore (CRIU)
	StepPorts     = "ports"     // restore: wait for TIME_WAIT sockets on the checkpoint's listening ports
)

// Sentinel errors of the orchestration; test with errors.Is.
var (
	// errNoTarget: the target has no process at all (an empty
	// container). It is cuda.ErrNoProcess, cryo's one "no process", in the
	// words of a whole target, so that one errors.Is and one class cover
	// both.
	errNoTarget = report.Sentinel("no process to checkpoint", cuda.ErrNoProcess)
	// ErrRollback: a checkpoint failed and CUDA could not be resumed either.
	ErrRollback = errors.New("CUDA could not be resumed after a failed checkpoint")
	// ErrDirInUse: the image directory already holds a checkpoint.
	ErrDirInUse = report.Sentinel("image directory already holds a checkpoint", errdefs.ErrAlreadyExists)
	// ErrDirNotEmpty: the image directory holds files of its own, which a
	// checkpoint would digest and carry into its image.
	ErrDirNotEmpty = report.Sentinel("image directory is not empty", errdefs.ErrAlreadyExists)
	// ErrNothingToFinish: `cryo checkpoint --finish` on a checkpoint that
	// finished.
	ErrNothingToFinish = errors.New("checkpoint already finished")
	// ErrNoCRIU: no CRIU binary was found.
	ErrNoCRIU = report.Sentinel("CRIU not found", errdefs.ErrFailedPrecondition)
)

// CRIUError is a failed CRIU (or runc) call. Dump and restore callbacks
// return it so that the orchestration can name the log in its message.
type CRIUError struct {
	Op      string // "dump", "restore"
	LogPath string
	Err     error
	// Images is the checkpoint's CRIU images, of a restore: where the
	// message finds the mount that CRIU names only by its ID.
	Images string
}

func (e *CRIUError) Error() string {
	if line := criu.LogCause(e.LogPath); line != "" {
		return fmt.Sprintf("criu %s failed: %s%s%s", e.Op, line, criu.KnownCause(line), unmappedMount(line, e.Images))
	}
	return fmt.Sprintf("criu %s failed: %s", e.Op, strings.Join(strings.Fields(e.Err.Error()), " "))
}

func (e *CRIUError) Unwrap() error { return e.Err }

// RuncCRIUError wraps an error of runc checkpoint or restore, which names
// CRIU's log as "log file: PATH" (containerd's runc shim: "path= PATH"), so
// that its message quotes the log's cause instead of runc's "criu failed:
// type NOTIFY errno 0".
func RuncCRIUError(op string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, key := range []string{"log file: ", "path= "} {
		i := strings.Index(msg, key)
		if i < 0 {
			continue
		}
		path := strings.Fields(msg[i+len(key):])
		if len(path) > 0 && criu.LogCause(path[0]) != "" {
			return &CRIUError{Op: op, LogPath: path[0], Err: err}
		}
	}
	return err
}

// CRIULogPath returns the CRIU log named by err, if any.
func CRIULogPath(err error) string {
	var ce *CRIUError
	if errors.As(err, &ce) {
		return ce.LogPath
	}
	return ""
}
