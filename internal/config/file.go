package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Load reads the environment with an environment file merged beneath it:
// file, else $CRYO_RUNC_ENV, else /etc/cryo/cryo-runc.env if it exists.
// Podman and conmon start a runtime with an almost empty environment, so
// settings such as CRYO_RUNC or CRYO_LIBCUDA come from a file. A variable
// already set in the environment wins over the file, so a caller can
// override it. Nothing is written into the process environment: children
// get Config.Environ explicitly.
func Load(file string) (Config, error) {
	environ := os.Environ()
	path, explicit := envFile(file)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return parse(environ), nil
	}
	if err != nil {
		return parse(environ), report.WithRemedy(fmt.Errorf("read the environment file: %w", err), "fix it, or the --cryo-env flag or $"+EnvEnvFile+" naming it")
	}
	defer f.Close()
	extra, err := readEnvFile(f.Name(), f)
	if err != nil {
		return parse(environ), err
	}
	c := parse(merge(environ, extra))
	c.EnvFile, _ = filepath.Abs(path)
	return c, nil
}

// envFile is the file to read and whether someone named it.
func envFile(flag string) (string, bool) {
	if flag != "" {
		return flag, true
	}
	if p := os.Getenv(EnvEnvFile); p != "" {
		return p, true
	}
	return DefaultEnvFile, false
}

// readEnvFile parses KEY=VALUE lines; blank lines, # comments and a
// leading `export ` are allowed, and quotes around a value are dropped.
func readEnvFile(name string, r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(strings.TrimPrefix(k, "export "))
		if !ok || k == "" {
			return nil, report.WithRemedy(fmt.Errorf("%s:%d: want KEY=VALUE, got %q", name, n, line), "fix that line")
		}
		out = append(out, k+"="+strings.Trim(strings.TrimSpace(v), `"'`))
	}
	return out, sc.Err()
}

// merge adds the file's settings that the environment does not set.
func merge(environ, file []string) []string {
	set := map[string]bool{}
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := append([]string(nil), environ...)
	for _, kv := range file {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] {
			out = append(out, kv)
			set[k] = true
		}
	}
	return out
}

// EnvFilePath is the environment file Load(flag) reads: flag, else
// $CRYO_RUNC_ENV, else the default (which need not exist).
func EnvFilePath(flag string) string {
	path, _ := envFile(flag)
	return path
}

// LoadFile parses an environment file alone, without the process's
// environment: what the file itself sets, so that `cryo doctor` can check
// the settings cryo-runc gets from it.
func LoadFile(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("read the environment file: %w", err)
	}
	defer f.Close()
	env, err := readEnvFile(path, f)
	if err != nil {
		return Config{}, err
	}
	c := parse(env)
	c.EnvFile = path
	return c, nil
}
