package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/cudacr/proc"
	"github.com/cryo-gpu/cryo/snapshot/archive"
)

// An image restore unpacks into a work directory that holds the process's
// memory, decrypted when the image was encrypted. It must not outlive the
// restore: it is removed on success and failure (a deferred cleanup), on
// SIGINT, SIGTERM and SIGHUP (the signal context cancels the restore, and
// the cleanup runs as it unwinds), and after SIGKILL by the next restore,
// which removes the work directories of dead cryo processes: each one's
// name carries its owner's pid.

// restoreBase is where work directories go: $CRYO_RESTORE_DIR (tests, hosts
// whose /var/lib is small), else /var/lib/cryo/restore.
func restoreBase() string { return cfg.RestoreDir }

// workDir returns dir when given (kept afterwards), else a new owner-only
// directory under restoreBase, and the function that removes it.
func workDir(dir string) (string, func(), error) {
	if dir != "" {
		// Said first: the restore's last line on stdout is the pid.
		fmt.Fprintf(os.Stderr, "the work directory %s is kept (--dir); it holds the checkpoint's memory unencrypted: remove it when done\n", dir)
		return dir, func() {}, nil
	}
	base := restoreBase()
	if err := os.MkdirAll(base, archive.DirMode); err != nil {
		return "", nil, fmt.Errorf("work directory: %w; remedy: pass --dir", err)
	}
	sweepWorkDirs(base)
	d, err := os.MkdirTemp(base, fmt.Sprintf("image-%d-", os.Getpid()))
	if err != nil {
		return "", nil, fmt.Errorf("work directory: %w; remedy: pass --dir", err)
	}
	return d, func() { removeWorkDir(d) }, nil
}

func removeWorkDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "warning: could not remove the work directory %s, which holds the checkpoint's memory: %v; remedy: remove it by hand\n", dir, err)
	}
}

// sweepWorkDirs removes the work directories left by cryo processes that
// are gone (killed with SIGKILL, or by a crash).
func sweepWorkDirs(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if pid, ok := workDirOwner(e.Name()); ok && e.IsDir() && !proc.Alive(pid) {
			removeWorkDir(filepath.Join(base, e.Name()))
		}
	}
}

// workDirOwner parses "image-<pid>-<random>".
func workDirOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "image-")
	if !ok {
		return 0, false
	}
	p, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	return pid, ok && err == nil && pid > 0
}
