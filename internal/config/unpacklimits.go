package config

import (
	"fmt"
	"strconv"

	"github.com/cryo-gpu/cryo/internal/report"
)

// The bounds on what one tar of a checkpoint image may hold when cryo
// unpacks it for a restore (positive integers); unset: the defaults of
// internal/ociimage/archive (100 000 entries, depth 32, names of 255
// bytes, paths of 4096).
const (
	EnvUnpackMaxEntries = "CRYO_UNPACK_MAX_ENTRIES"
	EnvUnpackMaxDepth   = "CRYO_UNPACK_MAX_DEPTH"
	EnvUnpackMaxName    = "CRYO_UNPACK_MAX_NAME"
	EnvUnpackMaxPath    = "CRYO_UNPACK_MAX_PATH"
)

// UnpackLimits are the configured bounds; zero: the default.
type UnpackLimits struct {
	MaxEntries, MaxDepth, MaxNameBytes, MaxPathBytes int
}

// unpackLimits parses the variables. One that is set but not a positive
// integer keeps its default, which is the tighter bound, and is a problem
// for the doctor.
func unpackLimits(env map[string]string) (UnpackLimits, []error) {
	var u UnpackLimits
	var problems []error
	for _, f := range []struct {
		key string
		to  *int
	}{{EnvUnpackMaxEntries, &u.MaxEntries}, {EnvUnpackMaxDepth, &u.MaxDepth}, {EnvUnpackMaxName, &u.MaxNameBytes}, {EnvUnpackMaxPath, &u.MaxPathBytes}} {
		v := env[f.key]
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			problems = append(problems, report.WithRemedy(fmt.Errorf("%s=%q is not a positive integer, so its default applies", f.key, v), "give a number such as 200000"))
			continue
		}
		*f.to = n
	}
	return u, problems
}
