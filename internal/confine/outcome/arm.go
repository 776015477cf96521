package outcome

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/criu"
)

// ScriptName is the action script that runs the check, in the bundle.
const ScriptName = "cryo-criu-verify.sh"

// Armed is a restore whose CRIU runs the check at pre-resume; Disarm
// takes that out of the bundle again.
type Armed struct {
	bundle  string
	line    string       // the configuration line Arm added, "" if it was there
	unadopt func() error // names the container's own CRIU configuration again
}

// Arm makes CRIU run the check at pre-resume of the next restore of the
// bundle: it writes ScriptName, which execs action (cryo-criu-action)
// with the bundle and the container id and says that only the check is
// to run, and adds it to the bundle's CRIU configuration (criu.AddConfig),
// unless it is there. The verdict of an earlier restore is removed, so
// that the one ReadVerdict finds is this restore's.
func Arm(bundle, id, action string) (Armed, error) {
	bundle, err := filepath.Abs(bundle)
	if err != nil {
		return Armed{}, err
	}
	script := filepath.Join(bundle, ScriptName)
	body := fmt.Sprintf("#!/bin/sh\n%s=%s %s=%s %s=1 exec %s\n", config.EnvContainerID, shellQuote(id),
		config.EnvBundle, shellQuote(bundle), config.EnvOutcomeOnly, shellQuote(action))
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		return Armed{}, fmt.Errorf("write %s: %w", script, err)
	}
	if err := os.Remove(filepath.Join(bundle, VerdictFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Armed{}, err
	}
	line := "action-script " + script
	// A container that names a CRIU configuration of its own keeps its
	// lines, in cryo's file for this restore (criu.AdoptForeign).
	unadopt, err := criu.AdoptForeign(bundle)
	if err != nil {
		return Armed{}, fmt.Errorf("%w: the restored tasks cannot be checked before they run", err)
	}
	added, err := criu.AddConfig(bundle, line)
	if err != nil {
		return Armed{}, errors.Join(fmt.Errorf("%w: the restored tasks cannot be checked before they run", err), unadopt())
	}
	a := Armed{bundle: bundle, unadopt: unadopt}
	if len(added) > 0 {
		a.line = line
	}
	return a, nil
}

// Disarm takes the line Arm added out of the bundle's CRIU configuration:
// a later checkpoint of the container must not run it. The script and
// the verdict stay for the reader of the restore's outcome.
func (a Armed) Disarm() error {
	var err error
	if a.line != "" {
		err = criu.RemoveConfig(a.bundle, a.line)
	}
	if a.unadopt != nil {
		err = errors.Join(err, a.unadopt())
	}
	return err
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
