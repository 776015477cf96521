package cli

import (
	"fmt"
	"os"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/report"
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
		fmt.Fprintf(messages(), "the work directory %s is kept (--dir); it holds the checkpoint's memory unencrypted: remove it when done\n", dir)
		return dir, func() {}, nil
	}
	d, err := imagerestore.NewWorkDir(restoreBase())
	if err != nil {
		return "", nil, report.WithRemedy(fmt.Errorf("work directory: %w", err), "pass --dir")
	}
	return d, func() { removeWorkDir(d) }, nil
}

func removeWorkDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(messages(), "warning: could not remove the work directory %s, which holds the checkpoint's memory: %v; remedy: remove it by hand\n", dir, err)
	}
}
