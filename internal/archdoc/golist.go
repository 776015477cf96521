package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// pkg is what the document needs of one package, as `go list` reports it.
type pkg struct {
	ImportPath string
	Name       string
	Doc        string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string // non-test imports only: tests may import upwards
	Module     *struct{ Path string }
}

// rel is the package's path inside the module: internal/orchestrate, cmd/cryo.
func (p *pkg) rel(module string) string {
	return strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
}

// moduleRoot is the directory of the main module's go.mod, wherever the
// generator or its test runs from.
func moduleRoot() (string, error) {
	out, err := goCmd("", "env", "GOMOD")
	if err != nil {
		return "", err
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// loadPackages lists the module's packages with their files and imports,
// sorted by import path. The build is pinned to linux/amd64 with cgo, the
// only platform cryo runs on, so that the graph does not depend on where
// `make docs` runs.
func loadPackages(root string) (module string, pkgs []*pkg, err error) {
	out, err := goCmd(root, "list", "-json=ImportPath,Name,Doc,Dir,GoFiles,CgoFiles,Imports,Module", "./...")
	if err != nil {
		return "", nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			return "", nil, fmt.Errorf("go list: %w", err)
		}
		if p.Module != nil && strings.HasPrefix(p.ImportPath, p.Module.Path+"/integration/") {
			continue // integration/harness and the tests over it: no part of cryo
		}
		if len(p.GoFiles)+len(p.CgoFiles) == 0 {
			continue // tests only (integration/): no import of theirs is a dependency
		}
		if p.Module != nil {
			module = p.Module.Path
		}
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].ImportPath < pkgs[j].ImportPath })
	return module, pkgs, nil
}

func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
