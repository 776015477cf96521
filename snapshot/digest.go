package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// ComputeDigests returns the sha256 of every file of the image directory dir
// but the manifest and logs (which change after the dump: CRIU writes its
// restore log there). Files are hashed in parallel: the pages of a GPU
// checkpoint run to tens of GB.
func ComputeDigests(dir string) (map[string]string, error) {
	files, err := digestedFiles(dir)
	if err != nil {
		return nil, err
	}
	sums := make([]string, len(files))
	errs := make([]error, len(files))
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.NumCPU(), 4); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				sums[i], errs[i] = fileSHA256(filepath.Join(dir, files[i]))
			}
		}()
	}
	for i := range files {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("digest checkpoint files in %s: %w", dir, err)
	}
	out := make(map[string]string, len(files))
	for i, f := range files {
		out[f] = sums[i]
	}
	return out, nil
}

// VerifyDigests checks the files of dir against m.Digests: each listed file
// must be there with its digest, and every CRIU image file (*.img) must be
// listed. The error is a *CorruptFileError naming the first bad file, or
// ErrCorrupt when the manifest has no digests (the checkpoint never finished).
func VerifyDigests(dir string, m *Manifest) error {
	if m.Digests == nil {
		return fmt.Errorf("%s: the manifest has no file digests, so the checkpoint did not finish; remedy: re-take the checkpoint: %w", dir, ErrCorrupt)
	}
	names := make([]string, 0, len(m.Digests))
	for name := range m.Digests {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := verifyFile(dir, name, m.Digests[name]); err != nil {
			return err
		}
	}
	return uncovered(dir, m.Digests)
}

func verifyFile(dir, name, want string) error {
	have, err := fileSHA256(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return &CorruptFileError{File: name, Reason: "missing"}
	}
	if err != nil {
		return &CorruptFileError{File: name, Reason: err.Error()}
	}
	if have != want {
		return &CorruptFileError{File: name, Reason: fmt.Sprintf("sha256 mismatch (want %.12s…, have %.12s…)", want, have)}
	}
	return nil
}

// uncovered fails on an image file that no digest covers: a file added after
// the checkpoint would otherwise be restored unchecked.
func uncovered(dir string, digests map[string]string) error {
	files, err := digestedFiles(dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		if _, ok := digests[f]; !ok && strings.HasSuffix(f, ".img") {
			return &CorruptFileError{File: f, Reason: "not covered by the manifest's digests"}
		}
	}
	return nil
}

// digestedFiles lists the regular files of dir, relative and sorted, that
// the digests cover.
func digestedFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if !skipDigest(rel) {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// skipDigest leaves out the manifest itself (and its temp files), logs, and
// CRIU's restore statistics: all of them are written after the dump.
func skipDigest(rel string) bool {
	base := filepath.Base(rel)
	return base == ManifestName || strings.HasPrefix(base, "."+ManifestName) ||
		strings.HasSuffix(base, ".log") || base == "stats-restore"
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
