package digest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// A stamp may only vouch for bytes that nobody could change without moving
// a file's ctime. The kernel moves ctime on every write(2) and on the first
// write fault through each writable shared mapping (page_mkwrite), but not
// on later writes through a mapping whose page is still dirty: those reach
// the page cache without a fault. A mapping made before the hashing, with
// its page dirtied then, can thus change the file after the stamp without
// a trace (integration/cli/trust_stamp_test.go does it on ext4).
//
// A writable shared mapping holds its file open for writing. So a stamp is
// written only for files that nobody holds open for writing, from before
// their identities are taken (and, for a verification, before they are
// hashed) until the stamp is written: any change after that needs a new
// open, and its first write, by either route, moves ctime. A read lease
// (fcntl F_SETLEASE F_RDLCK) is how the kernel says so: it is granted only
// while the file is open for writing nowhere, and an open for writing
// while it is held breaks it (the opener waits for the holder to let go,
// at most /proc/sys/fs/lease-break-time). Go ignores the SIGIO of a break
// unless it was asked for; the holder sees the break through F_GETLEASE.
// Where no lease can be taken (not root, NFS, leases disabled), no stamp is
// written and every restore hashes.

// readLeases are read leases held on files of an image directory.
type readLeases struct {
	files []*os.File
}

// holdReadLeases takes a read lease on each named file of dir. It fails,
// holding none, when one of them is open for writing anywhere or cannot be
// leased.
func holdReadLeases(dir string, names []string) (*readLeases, error) {
	l := &readLeases{files: make([]*os.File, 0, len(names))}
	for _, name := range names {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			l.release()
			return nil, err
		}
		l.files = append(l.files, f)
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
			l.release()
			if errors.Is(err, unix.EAGAIN) {
				return nil, fmt.Errorf("%s is open for writing (a writable mapping holds it open too): %w", name, err)
			}
			return nil, fmt.Errorf("read lease on %s: %w", name, err)
		}
	}
	return l, nil
}

// intact reports whether every lease is still held: no one has opened one
// of the files for writing since they were taken.
func (l *readLeases) intact() bool {
	for _, f := range l.files {
		if t, err := unix.FcntlInt(f.Fd(), unix.F_GETLEASE, 0); err != nil || t != unix.F_RDLCK {
			return false
		}
	}
	return true
}

// release lets go of the leases (closing a file drops its lease).
func (l *readLeases) release() {
	if l == nil {
		return
	}
	for _, f := range l.files {
		f.Close()
	}
	l.files = nil
}

// noWriters reports whether none of the named files of dir is open for
// writing right now.
func noWriters(dir string, names []string) bool {
	l, err := holdReadLeases(dir, names)
	l.release()
	return err == nil
}

// settled reports whether a write from now on would give each file a ctime
// other than the one recorded in ids. The kernel stamps times from a clock
// that ticks every few milliseconds (and some file systems keep whole
// seconds): a write within the tick of the last change would leave ctime
// as recorded. It waits up to a few ticks for the clock to move past.
func settled(ids map[string]fileID) bool {
	var last int64
	whole := true
	for _, id := range ids {
		last = max(last, id.Ctime)
		whole = whole && id.Ctime%int64(time.Second) == 0
	}
	if whole {
		last += int64(time.Second) - 1 // a file system of whole seconds
	}
	for try := 0; try < 5; try++ {
		if now := coarseNow(); now > last {
			return true
		} else if last-now > int64(50*time.Millisecond) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// coarseNow is the clock that file times are taken from, in nanoseconds.
func coarseNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
