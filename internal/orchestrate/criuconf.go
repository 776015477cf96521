package orchestrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A container's CRIU configuration file. runc names to CRIU the file of the
// config.json annotation org.criu.config (without one, /etc/criu/runc.conf),
// and CRIU lets that file override what runc asked for over RPC. cryo uses it
// for the options that a caller of runc does not pass: the action script of
// package hooks, and tcp-established on a containerd restore. Its lines are
// CRIU's long options without their dashes ("tcp-established").
const (
	// CRIUConfigAnnotation is the annotation runc reads the file name from.
	CRIUConfigAnnotation = "org.criu.config"
	// CRIUConfName is cryo's file, in the bundle.
	CRIUConfName = "cryo-criu.conf"
)

// runcCRIUConf is the file runc names when the annotation is absent; cryo's
// file starts as a copy of it, since the annotation takes its place.
var runcCRIUConf = "/etc/criu/runc.conf"

// ErrForeignCRIUConfig: the container already names a CRIU configuration of
// its own, which cryo leaves alone.
var ErrForeignCRIUConfig = errors.New("container has its own org.criu.config")

// AddCRIUConfig merges lines into cryo's CRIU configuration in bundle, each
// line once, and points config.json's annotation at the file. It returns
// the lines that were not there yet, which RemoveCRIUConfig can take out
// again. A config.json that names another file is left as it is
// (ErrForeignCRIUConfig, with the lines to add to that file by hand).
func AddCRIUConfig(bundle string, lines ...string) ([]string, error) {
	conf, spec, err := criuConf(bundle)
	if err != nil {
		return nil, err
	}
	cur, named := annotation(spec, CRIUConfigAnnotation)
	if cur != "" && cur != conf {
		return nil, fmt.Errorf("%w (%s); remedy: add the line(s) `%s` to it by hand", ErrForeignCRIUConfig, cur, strings.Join(lines, "`, `"))
	}
	base := conf
	if !named {
		base = runcCRIUConf
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
		setAnnotation(spec, CRIUConfigAnnotation, conf)
		if err := writeSpec(bundle, spec); err != nil {
			return nil, err
		}
	}
	return all[len(have):], nil
}

// RemoveCRIUConfig takes lines out of cryo's CRIU configuration in bundle,
// if config.json names it: an option meant for one restore must not apply
// to the container's later checkpoints.
func RemoveCRIUConfig(bundle string, lines ...string) error {
	conf, spec, err := criuConf(bundle)
	if err != nil {
		return err
	}
	if cur, _ := annotation(spec, CRIUConfigAnnotation); cur != conf {
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

// criuConf returns the path of cryo's file in bundle and the bundle's spec.
func criuConf(bundle string) (string, map[string]any, error) {
	bundle, err := filepath.Abs(bundle)
	if err != nil {
		return "", nil, err
	}
	spec, err := readSpec(bundle)
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(bundle, CRIUConfName), spec, nil
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

// readSpec reads config.json as generic JSON, numbers kept verbatim, so that
// fields cryo does not know survive the rewrite unchanged.
func readSpec(bundle string) (map[string]any, error) {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("read bundle config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("parse %s/config.json: %w", bundle, err)
	}
	return spec, nil
}

// writeSpec replaces config.json atomically.
func writeSpec(bundle string, spec map[string]any) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	p := filepath.Join(bundle, "config.json")
	tmp := p + ".cryo-tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write bundle config: %w", err)
	}
	return os.Rename(tmp, p)
}

// annotation returns the value of key and whether the spec has it at all:
// runc reads an empty value as "no CRIU configuration file".
func annotation(spec map[string]any, key string) (string, bool) {
	a, _ := spec["annotations"].(map[string]any)
	v, ok := a[key].(string)
	return v, ok
}

func setAnnotation(spec map[string]any, key, value string) {
	a, _ := spec["annotations"].(map[string]any)
	if a == nil {
		a = map[string]any{}
		spec["annotations"] = a
	}
	a[key] = value
}
