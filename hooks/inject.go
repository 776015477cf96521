package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrForeignCRIUConfig: the container already names a CRIU configuration of
// its own, which cryo leaves alone.
var ErrForeignCRIUConfig = errors.New("container has its own org.criu.config")

// Prepare writes the CRIU configuration and action script into bundle and
// points the bundle's config.json at them. action is the absolute path of
// cryo-criu-action; envFile (may be empty) is cryo-runc's environment file.
// A config.json that already names a CRIU configuration other than cryo's
// is left as it is (ErrForeignCRIUConfig).
func Prepare(bundle, id, action, envFile string) error {
	bundle, err := filepath.Abs(bundle)
	if err != nil {
		return err
	}
	conf := filepath.Join(bundle, criuConfName)
	spec, err := readSpec(bundle)
	if err != nil {
		return err
	}
	if cur := annotation(spec, CRIUConfigAnnotation); cur != "" && cur != conf {
		return fmt.Errorf("%w (%s); add `action-script %s` to it by hand to make direct runc checkpoints CUDA-safe", ErrForeignCRIUConfig, cur, filepath.Join(bundle, scriptName))
	}
	if err := writeScript(bundle, id, action, envFile); err != nil {
		return err
	}
	if err := os.WriteFile(conf, []byte("action-script "+filepath.Join(bundle, scriptName)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", conf, err)
	}
	setAnnotation(spec, CRIUConfigAnnotation, conf)
	return writeSpec(bundle, spec)
}

// writeScript writes the action script CRIU runs: it carries the container
// id and the environment file, which CRIU has no way to pass.
func writeScript(bundle, id, action, envFile string) error {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	fmt.Fprintf(&b, "%s=%s %s=%s exec %s\n", ContainerEnv, shellQuote(id), EnvFileEnv, shellQuote(envFile), shellQuote(action))
	p := filepath.Join(bundle, scriptName)
	if err := os.WriteFile(p, []byte(b.String()), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

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

func annotation(spec map[string]any, key string) string {
	a, _ := spec["annotations"].(map[string]any)
	v, _ := a[key].(string)
	return v
}

func setAnnotation(spec map[string]any, key, value string) {
	a, _ := spec["annotations"].(map[string]any)
	if a == nil {
		a = map[string]any{}
		spec["annotations"] = a
	}
	a[key] = value
}
