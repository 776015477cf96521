package ociimage

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// An encrypted layer is written to a temporary blob before its digest is
// known. Its name carries its writer's pid (".enc-<pid>-<random>"), as
// restore work directories do, so that opening the store removes those of
// writers killed before they could (SIGKILL, a crash): a build's own are
// removed on its failure or interrupt by encryptLayer.

const encTempPrefix = ".enc-"

// legacyEncTempAge is how old a temporary blob named before the pid was
// (".enc-<random>") must be to be taken as abandoned: no encryption of a
// layer takes a day.
const legacyEncTempAge = 24 * time.Hour

// createEncTemp creates this process's temporary blob in dir.
func createEncTemp(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, fmt.Sprintf("%s%d-*", encTempPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("temporary encrypted layer in %s: %w", dir, err)
	}
	return f, nil
}

// sweepEncTemps removes the temporary blobs of dir whose writer is gone.
func sweepEncTemps(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type().IsRegular() && staleEncTemp(e) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func staleEncTemp(e os.DirEntry) bool {
	rest, ok := strings.CutPrefix(e.Name(), encTempPrefix)
	if !ok {
		return false
	}
	p, _, withPID := strings.Cut(rest, "-")
	if pid, err := strconv.Atoi(p); withPID && err == nil && pid > 0 {
		return !procfs.Alive(pid)
	}
	info, err := e.Info()
	return err == nil && time.Since(info.ModTime()) > legacyEncTempAge
}
