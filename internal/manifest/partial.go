package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/report"
)

// PartialName marks an image directory whose checkpoint failed while its
// processes ran on: nothing in it is needed to bring them back. The
// process memory a partial dump wrote (often gigabytes) is removed; CRIU's
// logs stay, as the evidence the error quotes; the mark says why. A
// directory so marked may be given to the next checkpoint as it is.
const PartialName = "cryo-partial.json"

// Partial is the content of the mark.
type Partial struct {
	Time    time.Time `json:"time"`
	Error   string    `json:"error"`   // the failure, as it was reported
	Removed int       `json:"removed"` // image files removed
	Kept    []string  `json:"kept"`    // the logs left for the evidence
}

// MarkPartial removes the images of a failed checkpoint in dir, keeps its
// logs, and writes the mark. Only for a checkpoint whose processes run on.
func MarkPartial(dir string, cause error) (*Partial, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	p := &Partial{Time: time.Now().UTC(), Error: cause.Error()}
	for _, e := range entries {
		name := e.Name()
		if isEvidence(name) {
			p.Kept = append(p.Kept, name)
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return p, fmt.Errorf("remove the partial checkpoint's %s: %w", name, err)
		}
		p.Removed++
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return p, err
	}
	return p, os.WriteFile(filepath.Join(dir, PartialName), append(data, '\n'), 0o600)
}

// isEvidence: CRIU's and cryo's logs, which explain the failure.
func isEvidence(name string) bool {
	return strings.HasSuffix(name, ".log")
}

// ReadPartial returns the mark of dir, or nil when it has none.
func ReadPartial(dir string) (*Partial, error) {
	data, err := os.ReadFile(filepath.Join(dir, PartialName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p Partial
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, PartialName), err)
	}
	return &p, nil
}

// ClearPartial empties a directory marked partial, for a new checkpoint;
// a directory without the mark is left alone.
func ClearPartial(dir string) (bool, error) {
	p, err := ReadPartial(dir)
	if err != nil || p == nil {
		return false, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return false, err
		}
	}
	return true, nil
}

// CheckPartial refuses a directory marked partial, saying what happened.
func CheckPartial(dir string) error {
	p, err := ReadPartial(dir)
	if err != nil || p == nil {
		return err
	}
	return report.WithRemedy(fmt.Errorf("the checkpoint in %s did not finish: it failed at %s (%s) while its processes ran on, and its images were removed (logs kept: %s): %w", dir, p.Time.Format(time.RFC3339), p.Error, strings.Join(p.Kept, ", "), ErrPartial), "re-take the checkpoint (the directory can be given to --dir again)")
}
