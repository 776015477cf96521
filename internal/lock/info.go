package lock

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Readers of the lock directory for views such as `cryo ps`. They never
// take a lock: a view must not make a checkpoint that starts meanwhile
// lose its lock, nor wait for one. Whether a lock is held comes from the
// kernel's table of locks (/proc/locks), matched by device and inode.

// Info is one lock file of the lock directory.
type Info struct {
	Path string
	// Key is what the file locks: "id-<container>" or "pid-<N>"; "" when
	// the file name is a hash (a key with odd characters).
	Key string
	// Held: some process holds the flock now.
	Held bool
	// HolderPID, Op and Target are from the holder's line ("4242
	// checkpoint of container abc"): the pid of the cryo that holds it,
	// its operation, and the target it named. For a free lock they name
	// the last holder, and mean nothing.
	HolderPID int
	Op        string
	Target    string
}

// PID is the process a "pid-N" key locks, 0 for other keys.
func (l Info) PID() int {
	n, _ := strconv.Atoi(strings.TrimPrefix(l.Key, "pid-"))
	if !strings.HasPrefix(l.Key, "pid-") {
		return 0
	}
	return n
}

// Container is the container id of the target, "" for a bare pid set.
func (l Info) Container() string {
	if id, ok := strings.CutPrefix(l.Target, "container "); ok {
		return id
	}
	return ""
}

// Read lists the lock files of dir, held or not. A missing dir has
// no locks.
func Read(dir string) ([]Info, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.lock"))
	if err != nil {
		return nil, err
	}
	held, err := heldInodes()
	if err != nil {
		return nil, fmt.Errorf("read the kernel's lock table: %w", err)
	}
	var out []Info
	for _, f := range files {
		l, ok := readLockFile(f, held)
		if ok {
			out = append(out, l)
		}
	}
	return out, nil
}

func readLockFile(path string, held map[inodeKey]int) (Info, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return Info{}, false
	}
	l := Info{Path: path, Key: strings.TrimSuffix(filepath.Base(path), ".lock")}
	if !strings.HasPrefix(l.Key, "id-") && !strings.HasPrefix(l.Key, "pid-") {
		l.Key = "" // hashed
	}
	kernelPID, isHeld := held[inodeKey{uint64(unix.Major(uint64(st.Dev))), uint64(unix.Minor(uint64(st.Dev))), st.Ino}]
	l.Held = isHeld
	if f, err := os.Open(path); err == nil {
		var what string
		l.HolderPID, what = readHolder(f)
		f.Close()
		l.Op, l.Target, _ = strings.Cut(what, " of ")
	}
	if l.Held && l.HolderPID <= 0 {
		// Taken a moment ago, its line not written yet.
		l.HolderPID = kernelPID
	}
	return l, true
}

// inodeKey names a file as /proc/locks does: device major, minor, inode.
type inodeKey struct {
	maj, min uint64
	ino      uint64
}

// heldInodes reads /proc/locks: the files someone holds a lock on, with
// the pid the kernel gives for it.
func heldInodes() (map[inodeKey]int, error) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	held := map[inodeKey]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, pid, ok := parseLocksLine(sc.Text()); ok {
			held[k] = pid
		}
	}
	return held, sc.Err()
}

// parseLocksLine parses one line of /proc/locks, such as
// "3: FLOCK  ADVISORY  WRITE 4242 00:1a:1234 0 EOF". Lines of waiters
// ("3: -> FLOCK …") hold nothing and are skipped.
func parseLocksLine(line string) (inodeKey, int, bool) {
	f := strings.Fields(line)
	if len(f) < 6 || f[1] == "->" {
		return inodeKey{}, 0, false
	}
	pid, _ := strconv.Atoi(f[4])
	parts := strings.Split(f[5], ":")
	if len(parts) != 3 {
		return inodeKey{}, 0, false
	}
	maj, err1 := strconv.ParseUint(parts[0], 16, 32)
	min, err2 := strconv.ParseUint(parts[1], 16, 32)
	ino, err3 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return inodeKey{}, 0, false
	}
	return inodeKey{maj, min, ino}, pid, true
}
