package shim

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// ckptRecordName is the file in a task's bundle that says a checkpoint of
// the task is in flight: written when the shim's checkpoint begins,
// updated as each step begins, removed when the checkpoint ends. A shim
// killed mid-checkpoint cannot remove it, and the shim's `delete`, which
// containerd runs for a dead shim, reads it to say what became of the
// checkpoint (deadcheckpoint.go). The bundle is containerd's, and goes
// with the task.
const ckptRecordName = "cryo-checkpoint.json"

// ckptRecord is what the record holds.
type ckptRecord struct {
	ID      string    `json:"id"`
	Dir     string    `json:"dir"`                // the image directory
	WorkDir string    `json:"work_dir,omitempty"` // CRIU's, when not the image directory
	Exit    bool      `json:"exit"`               // --exit: the task was to stop after its dump
	Step    string    `json:"step,omitempty"`     // the last step begun
	Started time.Time `json:"started"`
}

// write replaces the record in bundle whole (a rename), so that `delete`
// never reads half of one.
func (r *ckptRecord) write(bundle string) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(bundle, "."+ckptRecordName)
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(bundle, ckptRecordName))
}

// removeCkptRecord removes bundle's record, if any.
func removeCkptRecord(bundle string) error {
	err := os.Remove(filepath.Join(bundle, ckptRecordName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// readCkptRecord returns bundle's record, or nil when it has none.
func readCkptRecord(bundle string) (*ckptRecord, error) {
	data, err := os.ReadFile(filepath.Join(bundle, ckptRecordName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r ckptRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
