package manifest

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// DumpState is what a checkpoint whose cryo run did not finish (its
// manifest has no digests) holds, as `cryo inspect` tells the user.
type DumpState string

// Dump states, stable names (they are in `cryo inspect --json`).
const (
	// DumpNotStarted: the run stopped before CRIU wrote a complete image
	// set: interrupted (Ctrl-C, rolled back) or killed before or during
	// the dump. No inventory.img: nothing to restore.
	DumpNotStarted DumpState = "interrupted-before-dump"
	// DumpPartial: inventory.img is there but the dump did not complete.
	DumpPartial DumpState = "partial-dump"
	// DumpComplete: the dump completed; `cryo checkpoint --finish` or a
	// restore completes the checkpoint (see Complete).
	DumpComplete DumpState = "dump-completed"
	// DumpAbandoned: the dump completed, then the run failed after it (a
	// full disk at the last write) and gave the processes back, which ran
	// on: the images are whole but stale (AbandonDump).
	DumpAbandoned DumpState = "dump-abandoned"
)

// UnfinishedState classifies the unfinished checkpoint in dir (m may be
// nil). It tells an abandoned dump from a partial one by CRIU's own log:
// AbandonDump removes stats-dump but leaves the log's "Dumping finished
// successfully", which a dump cut short never writes.
func UnfinishedState(dir string, m *Manifest) (DumpState, error) {
	if ok, err := existsIn([]string{dir}, criuInventory); err != nil || !ok {
		return DumpNotStarted, err
	}
	done, err := DumpCompleted(dir, m)
	if err != nil || done {
		return DumpComplete, err
	}
	if logSaysDone(dir, m) {
		return DumpAbandoned, nil
	}
	return DumpPartial, nil
}

// logSaysDone reports whether a dump log in dir (or m's CRIU work
// directory) ends the dump successfully.
func logSaysDone(dir string, m *Manifest) bool {
	dirs := []string{dir}
	if m != nil && m.CRIUWorkDir != "" {
		dirs = append(dirs, m.CRIUWorkDir)
	}
	for _, d := range dirs {
		for _, name := range dumpLogs {
			data, err := os.ReadFile(filepath.Join(d, name))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return err == nil && bytes.Contains(data, criuDumpDone)
		}
	}
	return false
}

// States of a directory marked partial (MarkPartial): its images were
// removed because its processes ran on; CRIU's kept log tells whether the
// dump had completed before the run failed.
const (
	// DumpFailedRemoved: the run failed or was interrupted (Ctrl-C) before
	// CRIU's dump completed.
	DumpFailedRemoved DumpState = "failed-images-removed"
	// DumpStaleRemoved: the dump completed, then the run failed (a full
	// disk at the last write): the processes ran on, so it was stale.
	DumpStaleRemoved DumpState = "stale-images-removed"
)

// PartialState classifies a directory marked partial by its kept logs.
func PartialState(dir string) DumpState {
	if logSaysDone(dir, nil) {
		return DumpStaleRemoved
	}
	return DumpFailedRemoved
}
