package orchestrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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

// pausePath is the record of id: in the lock directory, where every front
// end meets already, owner-only.
func (o *Orchestrator) pausePath(id string) string {
	return filepath.Join(o.lockDir(), "paused-"+fileName("id-"+id)+".json")
}

func (o *Orchestrator) writePause(r *pauseRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.lockDir(), 0o700); err != nil {
		return err
	}
	tmp := o.pausePath(r.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write pause record: %w", err)
	}
	return os.Rename(tmp, o.pausePath(r.ID))
}

// readPause returns id's record, nil if it has none.
func (o *Orchestrator) readPause(id string) (*pauseRecord, error) {
	b, err := os.ReadFile(o.pausePath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pause record: %w", err)
	}
	var r pauseRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read pause record %s: %w", o.pausePath(id), err)
	}
	return &r, nil
}

func (o *Orchestrator) removePause(id string) {
	if err := os.Remove(o.pausePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		o.log().Warn("cannot remove the pause record", "id", id, "error", err)
	}
}

// ForgetPause removes the pause record of a container that is deleted.
func (o *Orchestrator) ForgetPause(id string) { o.removePause(id) }

// HasPause reports whether id has a pause record, readable or not.
func (o *Orchestrator) HasPause(id string) bool {
	_, err := os.Lstat(o.pausePath(id))
	return err == nil
}
