package cli

import (
	"errors"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/report"
)

// An image restore unpacks into a work directory that holds the process's
// memory, decrypted when the image was encrypted. It must not outlive the
// restore: it is removed on success and failure (a deferred cleanup), on
// SIGINT, SIGTERM and SIGHUP (the signal context cancels the restore, and
// the cleanup runs as it unwinds), and after SIGKILL by the next restore,
// which removes the work directories of dead cryo processes: each one's
// name carries its owner's pid (imagerestore.NewWorkDir). A --dir is the
// user's, and kept.

// restoreBase is where work directories go: $CRYO_RESTORE_DIR (tests, hosts
// whose /var/lib is small), else /var/lib/cryo/restore.
func (ap *app) restoreBase() string { return ap.cfg.RestoreDir }

// keptWorkDir warns that the --dir will hold the checkpoint's memory.
func (ap *app) keptWorkDir(dir string) {
	fmt.Fprintf(ap.messages(), "the work directory %s is kept (--dir); it holds the checkpoint's memory unencrypted: remove it when done\n", dir)
}

// removeWorkDir removes the restore's work directory, unless it is the
// --dir, and warns when it cannot.
func (ap *app) removeWorkDir(work *imagerestore.Prepared) {
	if err := work.Remove(); err != nil {
		msg := fmt.Sprintf("warning: could not remove the work directory %s, which holds the checkpoint's memory: %v", work.Dir, err)
		fmt.Fprintln(ap.messages(), report.Render(msg, "remove it by hand"))
	}
}

// stepCause is the cause of a failed step of imagerestore, as the step
// reported it: the CLI's messages are those of the store, the registry and
// its own checks.
func stepCause(err error) error {
	var f *imagerestore.Failure
	if errors.As(err, &f) {
		return f.Err
	}
	return err
}

// unpackError is stepCause, and for a work directory that could not be
// made, the way around it.
func unpackError(err error) error {
	var f *imagerestore.Failure
	if errors.As(err, &f) && f.Step == imagerestore.StepWorkDir {
		return report.WithRemedy(fmt.Errorf("work directory: %w", f.Err), "pass --dir")
	}
	return stepCause(err)
}
