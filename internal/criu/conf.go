package criu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cryo-gpu/cryo/internal/bundle"
	"github.com/cryo-gpu/cryo/internal/report"
)

// A container's CRIU configuration file. runc names to CRIU the file of the
// config.json annotation org.criu.config (without one, /etc/criu/runc.conf),
// and CRIU lets that file override what runc asked for over RPC. cryo uses it
// for the options that a caller of runc does not pass: the action script of
// internal/criuaction/hooks, and tcp-established on a containerd restore. Its lines are
// CRIU's long options without their dashes ("tcp-established").
const (
	// ConfigAnnotation is the annotation runc reads the file name from.
	ConfigAnnotation = "org.criu.config"
	// ConfName is cryo's file, in the bundle.
	ConfName = "cryo-criu.conf"
)

// runcConf is the file runc names when the annotation is absent; cryo's
// file starts as a copy of it, since the annotation takes its place.
var runcConf = "/etc/criu/runc.conf"

// ErrForeignConfig: the container already names a CRIU configuration of
// its own, which cryo leaves alone.
var ErrForeignConfig = errors.New("container has its own org.criu.config")

// AddConfig merges lines into cryo's CRIU configuration in the bundle in
// dir, each line once, and points config.json's annotation at the file.
// It returns the lines that were not there yet, which RemoveConfig can
// take out again. A config.json that names another file is left as it is
// (ErrForeignConfig, with the lines to add to that file by hand).
func AddConfig(dir string, lines ...string) ([]string, error) {
	conf, spec, err := confOf(dir)
	if err != nil {
		return nil, err
	}
	cur, named := spec.Annotation(ConfigAnnotation)
	if cur != "" && cur != conf {
		return nil, report.WithRemedy(fmt.Errorf("%w (%s)", ErrForeignConfig, cur), "add the line(s) `"+strings.Join(lines, "`, `")+"` to it by hand")
	}
	base := conf
	if !named {
		base = runcConf
	}
	have, err := readLines(base)
	if err != nil {
		return nil, err
	}
	all := merge(have, lines)
	if err := writeLines(conf, all); err != nil {
		return nil, err
	}
	if cur != conf {
		spec.SetAnnotation(ConfigAnnotation, conf)
		if err := spec.Write(dir); err != nil {
			return nil, err
		}
	}
	return all[len(have):], nil
}

// AdoptForeign lets cryo add lines for one restore to a container whose
// config.json names a CRIU configuration of its own: cryo's file in the
// bundle takes that file's lines, first, so that they still apply as
// before (over runc's RPC options), and the annotation names cryo's file
// until the returned function names the container's own again and leaves
// cryo's file holding its lines alone (runc's state of the restored
// container names the file it restored with). A container without one
// gets a function that does nothing.
func AdoptForeign(dir string) (undo func() error, err error) {
	none := func() error { return nil }
	conf, spec, err := confOf(dir)
	if err != nil {
		return none, err
	}
	own, _ := spec.Annotation(ConfigAnnotation)
	if own == "" || own == conf {
		return none, nil
	}
	lines, err := readLines(own)
	if err != nil {
		return none, err
	}
	if err := writeLines(conf, lines); err != nil {
		return none, err
	}
	spec.SetAnnotation(ConfigAnnotation, conf)
	if err := spec.Write(dir); err != nil {
		return none, err
	}
	return func() error {
		if err := writeLines(conf, lines); err != nil {
			return err
		}
		_, spec, err := confOf(dir)
		if err != nil {
			return err
		}
		spec.SetAnnotation(ConfigAnnotation, own)
		return spec.Write(dir)
	}, nil
}

// RemoveConfig takes lines out of cryo's CRIU configuration in the bundle
// in dir, if config.json names it: an option meant for one restore must
// not apply to the container's later checkpoints.
func RemoveConfig(dir string, lines ...string) error {
	conf, spec, err := confOf(dir)
	if err != nil {
		return err
	}
	if cur, _ := spec.Annotation(ConfigAnnotation); cur != conf {
		return nil
	}
	have, err := readLines(conf)
	if err != nil {
		return err
	}
	var keep []string
	for _, l := range have {
		if !slices.Contains(lines, l) {
			keep = append(keep, l)
		}
	}
	return writeLines(conf, keep)
}

// confOf returns the path of cryo's file in the bundle in dir, and the
// bundle's spec.
func confOf(dir string) (string, bundle.Raw, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, err
	}
	spec, err := bundle.ReadRaw(dir)
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(dir, ConfName), spec, nil
}

// merge appends the lines of add that have is missing.
func merge(have, add []string) []string {
	out := append([]string{}, have...)
	for _, l := range add {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// readLines reads a configuration file's non-empty lines; a missing file
// has none.
func readLines(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CRIU configuration: %w", err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

func writeLines(path string, lines []string) error {
	data := strings.Join(lines, "\n")
	if data != "" {
		data += "\n"
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
