package orchestrate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Step names one step of a checkpoint or restore.
type Step string

// The steps, in the order a checkpoint or restore takes them: Step values,
// untyped so that they also fill the Step field of a StepError.
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
	// ErrNoProcess: the target has no process (a dead pid, an empty container).
	ErrNoProcess = errors.New("no process to checkpoint")
	// ErrRollback: a checkpoint failed and CUDA could not be resumed either.
	ErrRollback = errors.New("CUDA could not be resumed after a failed checkpoint")
	// ErrDirInUse: the image directory already holds a checkpoint.
	ErrDirInUse = errors.New("image directory already holds a checkpoint")
	// ErrDirNotEmpty: the image directory holds files of its own, which a
	// checkpoint would digest and carry into its image.
	ErrDirNotEmpty = errors.New("image directory is not empty")
	// ErrNothingToFinish: `cryo checkpoint --finish` on a checkpoint that
	// finished.
	ErrNothingToFinish = errors.New("checkpoint already finished")
	// ErrNoCRIU: no CRIU binary was found.
	ErrNoCRIU = errors.New("CRIU not found")
)

// StepError is a failed checkpoint or restore: cryo's one error report
// (see report.StepError), whose Step is one of the Step names.
type StepError = report.StepError

// CRIUError is a failed CRIU (or runc) call. Dump and restore callbacks
// return it so that the orchestration can name the log in its message.
type CRIUError struct {
	Op      string // "dump", "restore"
	LogPath string
	Err     error
}

func (e *CRIUError) Error() string {
	if line := logCause(e.LogPath); line != "" {
		return fmt.Sprintf("criu %s failed: %s%s", e.Op, line, knownCause(line))
	}
	return fmt.Sprintf("criu %s failed: %s", e.Op, strings.Join(strings.Fields(e.Err.Error()), " "))
}

func (e *CRIUError) Unwrap() error { return e.Err }

// knownCause explains CRIU failures whose log line does not say what to do.
func knownCause(line string) string {
	// Linux 6.16 restricted SO_PASSCRED/SO_PASSSEC to unix and netlink
	// sockets; CRIU before 4.2 asks for them on every socket.
	if strings.Contains(line, "Can't get 1:16 opt") || strings.Contains(line, "Can't get 1:34 opt") {
		return " (CRIU older than 4.2 cannot checkpoint TCP or UDP sockets on Linux 6.16 and later: " +
			"use CRIU 4.2 or later, or let the application use unix sockets)"
	}
	return ""
}

// logCause returns the first "Error" line of a CRIU log that says why: the
// lines after it are the unwinding, "… FAILED." is a summary, and CRIU
// always fails to raise RLIMIT_NOFILE where the hard limit is fixed.
func logCause(path string) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "Error (") || harmless(line) {
			continue
		}
		if i := strings.Index(line, "): "); i > 0 {
			line = line[i+3:] // drop the timestamp and source location
		}
		return strings.TrimSpace(line)
	}
	return ""
}

// harmlessErrors are CRIU "Error" lines that do not say why a run failed:
// CRIU cannot raise its own RLIMIT_NOFILE where the hard limit is fixed
// (it logs that on every run, as "Can't setup RLIMIT_NOFILE for self" or a
// prlimit failure), and "… FAILED." is the summary of what went before.
var harmlessErrors = []string{"RLIMIT_NOFILE", "rlimit", "prlimit"}

func harmless(line string) bool {
	if strings.HasSuffix(line, "FAILED.") {
		return true
	}
	for _, h := range harmlessErrors {
		if strings.Contains(line, h) {
			return true
		}
	}
	return false
}

// logLines is CRIU's log at path (its first 16 MiB), or "".
func logLines(path string) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 16<<20))
	return string(b)
}

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
		if len(path) > 0 && logCause(path[0]) != "" {
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
