package imagerestore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// A work directory holds the processes' memory, decrypted: it lives only
// as long as the restore. Its name carries its owner's pid
// ("image-<pid>-<random>", as those of `cryo image restore`), so that the
// next restore removes the directories of owners that died before they
// could (a shim or a cryo killed with SIGKILL).

// NewWorkDir makes a new owner-only work directory under base, after
// removing those whose owner is gone. The shim and `cryo image restore`
// share it, so either one sweeps the other's leftovers.
func NewWorkDir(base string) (string, error) {
	if err := os.MkdirAll(base, archive.DirMode); err != nil {
		return "", err
	}
	sweep(base)
	d, err := os.MkdirTemp(base, fmt.Sprintf("image-%d-", os.Getpid()))
	if err != nil {
		return "", err
	}
	return d, os.Chmod(d, archive.DirMode)
}

// sweep removes the work directories whose owner is gone.
func sweep(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if pid, ok := owner(e.Name()); ok && e.IsDir() && !procfs.Alive(pid) {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// owner parses "image-<pid>-<random>".
func owner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "image-")
	if !ok {
		return 0, false
	}
	p, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	return pid, ok && err == nil && pid > 0
}
