// Package fakecuda builds and inspects cryo's fake CUDA driver: a fake
// libcuda.so.1, a fake libnvidia-ml.so.1 and fakecuda-app, a CUDA
// application that runs without a GPU. The C sources are embedded, so tests
// anywhere in the module can build the fakes with Build.
package fakecuda

import (
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed csrc/*.c csrc/*.h
var sources embed.FS

// Paths are the files Build produced.
type Paths struct {
	Dir     string // holds libcuda.so.1, libnvidia-ml.so.1 and fakecuda-app
	LibCUDA string // fake libcuda.so.1 with the checkpoint API
	LibNVML string // fake libnvidia-ml.so.1
	App     string // fakecuda-app
	// OldLibCUDA is a libcuda.so.1 without the checkpoint API, as on a
	// driver older than 570. It lives in Dir/noapi.
	OldLibCUDA string
}

// Build compiles the fakes with gcc into dir (created if needed).
func Build(dir string) (Paths, error) {
	src := filepath.Join(dir, "src")
	p := Paths{
		Dir:        dir,
		LibCUDA:    filepath.Join(dir, "libcuda.so.1"),
		LibNVML:    filepath.Join(dir, "libnvidia-ml.so.1"),
		App:        filepath.Join(dir, "fakecuda-app"),
		OldLibCUDA: filepath.Join(dir, "noapi", "libcuda.so.1"),
	}
	if err := writeSources(src); err != nil {
		return p, err
	}
	if err := os.MkdirAll(filepath.Dir(p.OldLibCUDA), 0o755); err != nil {
		return p, err
	}
	steps := [][]string{
		{"-shared", "-fPIC", "-O2", "-o", p.LibCUDA, filepath.Join(src, "fakecuda.c")},
		{"-shared", "-fPIC", "-O2", "-DFAKECU_NO_CHECKPOINT", "-o", p.OldLibCUDA, filepath.Join(src, "fakecuda.c")},
		{"-shared", "-fPIC", "-O2", "-o", p.LibNVML, filepath.Join(src, "fakenvml.c")},
		{"-O2", "-o", p.App, filepath.Join(src, "fakeapp.c"), "-ldl"},
	}
	for _, args := range steps {
		if err := gcc(args); err != nil {
			return p, err
		}
	}
	return p, nil
}

func writeSources(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := sources.ReadDir("csrc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		b, err := sources.ReadFile("csrc/" + e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func gcc(args []string) error {
	out, err := exec.Command("gcc", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fakecuda: gcc %v: %w\n%s", args, err, out)
	}
	return nil
}
