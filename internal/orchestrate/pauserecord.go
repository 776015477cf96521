package orchestrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"

	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// pauseRecord is what a GPU-free pause leaves for the resume and for a
// checkpoint of the paused container, which run in other processes (the
// shim serves each request anew; cryo-runc is one process per command).
// The driver stays the truth about each process's state: the record only
// says which suspended processes the pause owns, and what they held on the
// GPUs before the suspend freed it (NVML no longer sees that memory, and a
// checkpoint's manifest needs it).
type pauseRecord struct {
	ID        string             `json:"id"`
	Processes []manifest.Process `json:"processes"`
}

// pids are the processes the pause suspended.
func (r *pauseRecord) pids() []int {
	var pids []int
	for _, p := range r.Processes {
		pids = append(pids, p.PID)
	}
	return pids
}

// owns reports whether the pause suspended pid.
func (r *pauseRecord) owns(pid int) (manifest.Process, bool) {
	if r == nil {
		return manifest.Process{}, false
	}
	for _, p := range r.Processes {
		if p.PID == pid {
			return p, true
		}
	}
	return manifest.Process{}, false
}

// pauseStore is where the pause records are: the lock directory, where
// every front end meets already, owner-only.
type pauseStore struct {
	dir string
	log *slog.Logger
}

// pauses is the store of the pause records, beside the locks.
func (l locker) pauses() pauseStore { return pauseStore{dir: l.dir, log: l.log} }

// path is the record of id.
func (p pauseStore) path(id string) string {
	return filepath.Join(p.dir, "paused-"+lock.FileName("id-"+id)+".json")
}

func (p pauseStore) write(r *pauseRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	tmp := p.path(r.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write pause record: %w", err)
	}
	return os.Rename(tmp, p.path(r.ID))
}

// read returns id's record, nil if it has none.
func (p pauseStore) read(id string) (*pauseRecord, error) {
	b, err := os.ReadFile(p.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pause record: %w", err)
	}
	var r pauseRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read pause record %s: %w", p.path(id), err)
	}
	return &r, nil
}

func (p pauseStore) remove(id string) {
	if err := os.Remove(p.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.log.Warn("cannot remove the pause record", "id", id, "error", err)
	}
}

// has reports whether id has a record, readable or not.
func (p pauseStore) has(id string) bool {
	_, err := os.Lstat(p.path(id))
	return err == nil
}

// PauseInfo is one GPU-free pause record of the lock directory: a
// container paused by cryo-runc or the shim, and the processes that pause
// suspended, with what they held on the GPUs before.
type PauseInfo struct {
	Path      string
	ID        string
	Processes []manifest.Process
}

// ReadPauses lists the pause records of dir, sorted by container id. A
// record that cannot be parsed is an error naming its file; the others
// are still returned.
func ReadPauses(dir string) ([]PauseInfo, error) {
	files, err := filepath.Glob(filepath.Join(dir, "paused-*.json"))
	if err != nil {
		return nil, err
	}
	var out []PauseInfo
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // resumed meanwhile
		}
		var r pauseRecord
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("pause record %s: %w", f, err))
			continue
		}
		out = append(out, PauseInfo{Path: f, ID: r.ID, Processes: r.Processes})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, errors.Join(errs...)
}
