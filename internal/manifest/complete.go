package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// criuStatsDump is the file CRIU writes at the very end of a successful
// dump, after every image (and inventory.img) is written and just before it
// logs "Dumping finished successfully"; a failed dump never writes it.
const criuStatsDump = "stats-dump"

// criuDumpDone is the line CRIU logs at the end of a successful dump.
var criuDumpDone = []byte("Dumping finished successfully")

// dumpLogs are the dump logs a front end may leave in the image directory:
// cryo's own (bare) and runc's (when its work directory is the image
// directory). Podman and containerd keep runc's log elsewhere.
var dumpLogs = []string{"criu-dump.log", "dump.log"}

// DumpCompleted reports whether CRIU's dump into dir completed: the images
// are all there even though the cryo run that started it did not finish.
// It needs inventory.img and stats-dump, and, where a dump log is found,
// its "Dumping finished successfully" line. CRIU writes stats-dump and its
// log into its work directory: dir, or m's CRIUWorkDir (m may be nil).
func DumpCompleted(dir string, m *Manifest) (bool, error) {
	dirs := []string{dir}
	if m != nil && m.CRIUWorkDir != "" {
		dirs = append(dirs, m.CRIUWorkDir)
	}
	if ok, err := existsIn(dirs[:1], criuInventory); !ok || err != nil {
		return false, err
	}
	if ok, err := existsIn(dirs, criuStatsDump); !ok || err != nil {
		return false, err
	}
	for _, d := range dirs {
		for _, name := range dumpLogs {
			data, err := os.ReadFile(filepath.Join(d, name))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return false, err
			}
			return bytes.Contains(data, criuDumpDone), nil
		}
	}
	return true, nil
}

// existsIn reports whether name is in one of dirs.
func existsIn(dirs []string, name string) (bool, error) {
	for _, d := range dirs {
		_, err := os.Stat(filepath.Join(d, name))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	return false, nil
}

// AbandonDump makes the dump in dir one that DumpCompleted refuses, for a
// checkpoint whose processes ran on after their dump: the images no longer
// match the files and sockets the processes hold.
func AbandonDump(dir string) error {
	err := os.Remove(filepath.Join(dir, criuStatsDump))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Unfinished reports whether m is the manifest of a checkpoint whose run
// stopped between CRIU's dump and the digests (m has none).
func (m *Manifest) Unfinished() bool { return m != nil && m.Digests == nil }

// Complete finishes a checkpoint whose cryo run was interrupted after
// CRIU's dump completed (killed, or a full disk at the last write): it
// narrows the files' modes, hashes them, and writes the manifest with the
// digests and CompletedLate, durably. It refuses (ErrIncomplete) when the
// dump did not complete: the images are then partial and only a new
// checkpoint helps.
func Complete(dir string, m *Manifest, recs digest.Records) error {
	ok, err := DumpCompleted(dir, m)
	if err != nil {
		return fmt.Errorf("complete the checkpoint in %s: %w", dir, err)
	}
	if !ok {
		return report.WithRemedy(fmt.Errorf("%s: the checkpoint was interrupted before CRIU's dump completed, or abandoned after it when the processes ran on (no %s, or no \"Dumping finished successfully\" in the dump log), so its images are partial or stale: %w", dir, criuStatsDump, ErrIncomplete), "re-take the checkpoint")
	}
	if err := MakePrivate(dir); err != nil {
		return fmt.Errorf("complete the checkpoint in %s: %w", dir, err)
	}
	d, err := digest.Files(dir)
	if err != nil {
		return fmt.Errorf("complete the checkpoint in %s: %w", dir, err)
	}
	now := time.Now().UTC()
	done := *m
	done.Digests, done.CompletedLate = d, &now
	if err := Write(dir, &done); err != nil {
		return report.WithRemedy(fmt.Errorf("complete the checkpoint in %s (the manifest could not be saved: %w)", dir, err),
			"free space or make "+dir+" writable, then run `cryo checkpoint --finish "+dir+"`")
	}
	*m = done
	_ = recs.Stamp(dir, d) // best effort: without it the restore hashes again
	return nil
}

// SyncDir makes dir's files durable (CRIU writes its images without
// fsync), then dir itself, so that a rename in it survives a crash. Each
// file is synced on its own rather than the whole file system (syncfs):
// on a busy node the file system also holds other workloads' dirty data,
// which a checkpoint must not wait for. The page images were mostly
// written back during the dump already (digest.Watcher), so this waits
// only for what is left.
func SyncDir(dir string) error {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	if err := syncFiles(files); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return syncFile(dir)
}

// syncFiles fsyncs files, a few at a time: the device queues the writes of
// several files at once.
func syncFiles(files []string) error {
	errs := make([]error, len(files))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = syncFile(f)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// syncFile fsyncs one file or directory; opened read-only, which fsync
// accepts on Linux, so that files of mode 0400 are synced too.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
