// Package lock is cryo's per-target lock: one owner per target, so that a
// second checkpoint, pause or restore of the same container or process
// fails at once instead of suspending, resuming or thawing under the
// first. The locks are flock(2) locks on files of one directory, one per
// key: the container id (or "pid N" for a bare tree) and each pid of the
// process set, so that the bare CLI on a container's pid and cryo-runc on
// the container collide. The kernel drops a flock when its holder dies,
// so a killed cryo leaves no stale lock behind. Each file names its
// holder (pid, operation, target), for the message of a run that loses
// and for views such as `cryo ps`, which read the directory without
// taking a lock (info.go).
package lock

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/report"
	"golang.org/x/sys/unix"
)

// ErrBusy: another checkpoint or restore of the same target is in
// progress; nothing was touched.
var ErrBusy = report.Sentinel("target busy", errdefs.ErrUnavailable)

// BusyError names the target and the holder of its lock.
type BusyError struct {
	Target string // what this request wanted: "container abc", "pid 42"
	Holder string // what the holder does: "checkpoint of container abc"; "" if unknown
	PID    int    // the holder's pid; 0 if unknown
}

func (e *BusyError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "checkpoint or restore of " + e.Target
	}
	who := "another cryo"
	if e.PID > 0 {
		who = "pid " + strconv.Itoa(e.PID) + " of cryo"
	}
	return fmt.Sprintf("a %s is in progress (%s)", holder, who)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// Lock is the set of keys one run holds.
type Lock struct {
	op, target string // "checkpoint", "container abc": written into each file for a loser to read
	dir        string
	mu         sync.Mutex
	files      map[string]*os.File
}

// Target locks the target id for op ("checkpoint", "restore") in dir. A
// front end whose run spans several entry points (a restore: check, runc
// restore, CUDA resume) takes it first and hands it to each of them (see
// For). It fails at once with a *BusyError if another run holds it.
func Target(dir, op, id string) (*Lock, error) {
	l, err := open(dir, op, describeTarget(id))
	if err != nil {
		return nil, err
	}
	if err := l.add("id-" + id); err != nil {
		return nil, err
	}
	return l, nil
}

// PIDs locks only pids, for a run on processes without a container
// (`cryo cuda suspend`): it collides with any checkpoint or restore that
// holds one of them.
func PIDs(dir, op string, pids []int) (*Lock, error) {
	l, err := open(dir, op, "pid "+strings.Trim(fmt.Sprint(pids), "[]"))
	if err != nil {
		return nil, err
	}
	if err := l.AddPIDs(pids); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

func open(dir, op, target string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", dir, err)
	}
	return &Lock{op: op, target: target, dir: dir, files: map[string]*os.File{}}, nil
}

// For returns held, the lock a caller took for the whole run, or, when
// held is nil, takes one for id in dir; release is a no-op for a lock it
// did not take.
func For(held *Lock, dir, op, id string) (*Lock, func(), error) {
	if held != nil {
		return held, func() {}, nil
	}
	l, err := Target(dir, op, id)
	if err != nil {
		return nil, nil, err
	}
	return l, l.Release, nil
}

// Op is the operation the lock was taken for ("checkpoint", "restore").
func (l *Lock) Op() string { return l.op }

// AddPIDs also locks every pid of pids not held yet. On failure the pids it
// locked stay held until Release.
func (l *Lock) AddPIDs(pids []int) error {
	for _, p := range pids {
		if err := l.add("pid-" + strconv.Itoa(p)); err != nil {
			return err
		}
	}
	return nil
}

// Release drops every key. The files stay: removing one could let a
// third run lock a fresh file while a second still holds the old one.
func (l *Lock) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, f := range l.files {
		f.Close() // closing the last descriptor drops the flock
		delete(l.files, k)
	}
}

func (l *Lock) add(key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.files[key]; ok {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(l.dir, FileName(key)), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("lock %s: %w", key, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return busy(f, l.target)
		}
		return fmt.Errorf("lock %s: %w", key, err)
	}
	// Who holds it, for the message of a run that loses: written after the
	// flock, over the previous holder's line and then cut to length, so
	// that the file is never empty once written (see busy).
	line := []byte(fmt.Sprintf("%d %s of %s\n", os.Getpid(), l.op, l.target))
	if n, err := f.WriteAt(line, 0); err == nil {
		_ = f.Truncate(int64(n))
	}
	l.files[key] = f
	return nil
}

// busy reads the holder's line from a lock file someone else holds. The
// holder writes it just after taking the lock, so for a moment the file
// still names the previous holder (a process gone by now) or nobody: read
// again briefly until it names a live process.
func busy(f *os.File, target string) error {
	e := &BusyError{Target: target}
	for i := 0; i < 20; i++ {
		e.PID, e.Holder = readHolder(f)
		if e.PID > 0 && unix.Kill(e.PID, 0) == nil {
			return e
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.PID, e.Holder = 0, ""
	return e
}

// readHolder parses the holder's line. Only the first line counts: a new
// holder writes its line over the old one before it cuts the file, so a
// read in between sees the new line followed by the rest of a longer old
// one ("505 pause of container cc\ncc\n" after "505 checkpoint of …").
func readHolder(f *os.File) (int, string) {
	buf := make([]byte, 512)
	n, _ := f.ReadAt(buf, 0)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	pid, what, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		return 0, ""
	}
	p, _ := strconv.Atoi(pid)
	return p, what
}

// describeTarget is how a message names a target id: bare trees and
// checkpoint directories say what they are, anything else is a container.
func describeTarget(id string) string {
	if strings.HasPrefix(id, "pid ") || strings.HasPrefix(id, "checkpoint ") {
		return id
	}
	return "container " + id
}

// FileName is key as a file name: readable when it is plain, hashed when
// it holds anything else (a path, a slash, an odd container id). Other
// records of the lock directory (a pause's) are named after it too.
func FileName(key string) string {
	ok := len(key) <= 128
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r)) {
			ok = false
		}
	}
	if ok {
		return key + ".lock"
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16]) + ".lock"
}
