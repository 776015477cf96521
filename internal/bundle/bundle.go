// Package bundle reads and edits an OCI bundle's config.json, the one
// place that file is read: the typed spec that scopes and confines a
// restore, its annotations, and the verbatim form that cryo rewrites when
// it points runc at its CRIU configuration.
package bundle

import (
	"encoding/json"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SpecFile is the spec's file name in a bundle.
const SpecFile = "config.json"

// Path is the spec file of the bundle in dir.
func Path(dir string) string { return filepath.Join(dir, SpecFile) }

// SpecError is a spec that could not be read (Parse false) or parsed. Its
// message is the cause's alone: each caller says what it was reading for.
type SpecError struct {
	Parse bool
	Err   error
}

func (e *SpecError) Error() string { return e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

// IsParse reports whether err is a spec that was read but did not parse.
func IsParse(err error) bool {
	se, ok := err.(*SpecError)
	return ok && se.Parse
}

// Read reads the spec of the bundle in dir.
func Read(dir string) (*specs.Spec, error) {
	var s specs.Spec
	if err := decode(dir, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// decode reads the spec into v: the whole spec, or the part of it that a
// caller needs. A part decodes where the whole would not (a field of the
// wrong type elsewhere), as runc's own partial reads do.
func decode(dir string, v any) error {
	data, err := os.ReadFile(Path(dir))
	if err != nil {
		return &SpecError{Err: err}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &SpecError{Parse: true, Err: err}
	}
	return nil
}

// Annotations are the annotations of the bundle's spec; nil when it cannot
// be read (the caller's configuration then decides).
func Annotations(dir string) map[string]string {
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if decode(dir, &spec) != nil {
		return nil
	}
	return spec.Annotations
}

// CgroupsPath is the spec's linux.cgroupsPath, and whether the spec has a
// linux section at all; "", false when it cannot be read.
func CgroupsPath(dir string) (string, bool) {
	var spec struct {
		Linux *struct {
			CgroupsPath string `json:"cgroupsPath"`
		} `json:"linux"`
	}
	if decode(dir, &spec) != nil || spec.Linux == nil {
		return "", false
	}
	return spec.Linux.CgroupsPath, true
}
