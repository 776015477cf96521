// Package digest takes the digests of a checkpoint's files, during the dump
// (Watch) or after it (Files), verifies a directory against them (Verify),
// and keeps the records that let a directory verified on this host skip
// re-hashing (Stamp, VerifyStampedWith). It knows nothing of the manifest that
// carries the digests: callers pass the digest map, name to digest.
//
// A digest is one of:
//
//   - "sha256-chunked-<N>MiB:<size>:<hex>", written by this cryo: the file
//     (<size> bytes) is cut into chunks of N MiB, the last one shorter (an
//     empty file is one empty chunk), and <hex> is the sha256 of the
//     concatenated 32-byte sha256 digests of its chunks, in file order. The
//     chunks are hashed in parallel, so a large file takes a fraction of the
//     time of one sha256 stream. With coreutils (for a non-empty file):
//     split -b 16M F c. && for c in c.*; do sha256sum $c | cut -c1-64; done | xxd -r -p | sha256sum
//   - "<hex>": the plain sha256 of the file, written by manifest format
//     version 1.
//
// Verify reads both.
package digest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/cryo-gpu/cryo/internal/report"
)

const (
	// ChunkSize is the chunk size of the digests that Files writes: small
	// enough that the chunks of one pages image keep every core busy,
	// large enough that the chunk digests are a small hash.
	ChunkSize     = 16 << 20
	chunkedPrefix = "sha256-chunked-"
)

// ManifestName is the file of an image directory that records its digests
// (internal/manifest's GPU manifest, which names itself by this constant). It is
// written after the digests are taken, so they leave it out.
const ManifestName = "cryo-manifest.json"

// readBufSize is each worker's read buffer: large reads, yet small enough
// to stay in cache while sha256 consumes them. A variable for the benchmark.
var readBufSize = 512 << 10

func chunkedName(chunk int64) string { return fmt.Sprintf("%s%dMiB", chunkedPrefix, chunk>>20) }

// Files returns the digest of every file of the image directory dir but
// the manifest and logs (which change after the dump: CRIU writes its
// restore log there), in the chunked format above. The chunks of all files
// are hashed in parallel, GOMAXPROCS at a time: the pages of a GPU
// checkpoint run to tens of GB.
func Files(dir string) (map[string]string, error) {
	return compute(dir, nil, nil)
}

// FilesWith is Files, reporting the bytes hashed to p.
func FilesWith(dir string, p Progress) (map[string]string, error) {
	return compute(dir, nil, p)
}

// earlySums returns chunk sums already known for the file rel of dir (inode
// ino, size bytes), or nil.
type earlySums func(rel string, ino uint64, size int64) map[int64][sha256.Size]byte

// compute is Files, hashing only the chunks that early does not already
// know, and reporting the bytes hashed to p (nil: none).
func compute(dir string, early earlySums, p Progress) (map[string]string, error) {
	files, err := digestedFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("digest checkpoint files in %s: %w", dir, err)
	}
	work := make([]*hashFile, len(files))
	for i, f := range files {
		path := filepath.Join(dir, f)
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("digest checkpoint files in %s: %w", dir, err)
		}
		work[i] = &hashFile{path: path, size: st.Size(), chunk: ChunkSize}
		if early != nil {
			work[i].known = early(f, st.Sys().(*syscall.Stat_t).Ino, st.Size())
		}
	}
	hashAll(work, p)
	out := make(map[string]string, len(files))
	var errs []error
	for i, f := range files {
		if work[i].err != nil {
			errs = append(errs, work[i].err)
			continue
		}
		out[f] = work[i].digest()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("digest checkpoint files in %s: %w", dir, err)
	}
	return out, nil
}

// Verify checks the files of dir against digests (the manifest's): each
// listed file must be there with its digest, and every CRIU image file
// (*.img) must be listed. The error is a *CorruptFileError naming a bad
// file, or ErrIncomplete and ErrCorrupt when digests is nil (the
// checkpoint never finished). The cheap checks (a file missing, of the
// wrong size, or not covered) come before any file is read; then all files
// are hashed in parallel.
func Verify(dir string, digests map[string]string) error {
	return VerifyWith(dir, digests, nil)
}

// VerifyWith is Verify, reporting the bytes hashed to p.
func VerifyWith(dir string, digests map[string]string, p Progress) error {
	return verifyWith(dir, digests, p, nil)
}

// verifyWith is VerifyWith, not hashing the files that vouched names: the
// caller verified their bytes another way as it laid them out (against an
// OCI blob digest that the image pins). They are still checked to be there,
// regular and of the recorded size.
func verifyWith(dir string, digests map[string]string, p Progress, vouched map[string]bool) error {
	if digests == nil {
		return report.WithRemedy(fmt.Errorf("%s: the manifest has no file digests, so the checkpoint did not finish: %w", dir, errors.Join(ErrIncomplete, ErrCorrupt)), fmt.Sprintf("`cryo checkpoint --finish %s` completes it if CRIU's dump did (a restore does so itself), else re-take the checkpoint", dir))
	}
	if err := confined(dir, digests); err != nil {
		return err
	}
	names := make([]string, 0, len(digests))
	for name := range digests {
		names = append(names, name)
	}
	sort.Strings(names)
	work := make([]*hashFile, len(names))
	for i, name := range names {
		want, err := parseDigest(digests[name])
		if err != nil {
			return &CorruptFileError{File: name, Reason: err.Error()}
		}
		path := filepath.Join(dir, name)
		st, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return &CorruptFileError{File: name, Reason: "missing"}
		}
		if err != nil {
			return &CorruptFileError{File: name, Reason: err.Error()}
		}
		if !st.Mode().IsRegular() {
			return &CorruptFileError{File: name, Reason: "not a regular file"}
		}
		if want.size >= 0 && st.Size() != want.size {
			return &CorruptFileError{File: name, Reason: fmt.Sprintf("sha256 mismatch (the file has %d bytes, the manifest records %d: truncated or extended)", st.Size(), want.size)}
		}
		work[i] = &hashFile{path: path, size: st.Size(), chunk: want.chunk, want: want.sum}
	}
	if err := uncovered(dir, digests); err != nil {
		return err
	}
	hashAll(unvouched(names, work, vouched), p)
	for i, name := range names {
		w := work[i]
		if vouched[name] {
			continue
		}
		if w.err != nil {
			return &CorruptFileError{File: name, Reason: w.err.Error()}
		}
		if have := w.sum(); have != w.want {
			return &CorruptFileError{File: name, Reason: fmt.Sprintf("sha256 mismatch (want %.12s…, have %.12s…)", w.want, have)}
		}
	}
	return nil
}

// unvouched is the work of the names that vouched leaves to hash.
func unvouched(names []string, work []*hashFile, vouched map[string]bool) []*hashFile {
	if len(vouched) == 0 {
		return work
	}
	var left []*hashFile
	for i, name := range names {
		if !vouched[name] {
			left = append(left, work[i])
		}
	}
	return left
}

// confined refuses a digest name that could reach a file outside dir: an
// absolute name, a ".." component, or a symlink on the way. The manifest
// travels with the image, so its names are as untrusted as its files; and
// Files never records a name through a symlink.
func confined(dir string, digests map[string]string) error {
	for name := range digests {
		if reason := unconfined(dir, name); reason != "" {
			return &CorruptFileError{File: name, Reason: reason}
		}
	}
	return nil
}

func unconfined(dir, name string) string {
	if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name {
		return "the manifest names a file outside the image directory (absolute or not a clean relative path)"
	}
	cur := dir
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "the manifest names a file outside the image directory (..)"
		}
		cur = filepath.Join(cur, part)
		st, err := os.Lstat(cur)
		if err != nil {
			return "" // missing: reported as such by the caller
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return "the manifest names a file through a symlink, which could lead outside the image directory"
		}
	}
	return ""
}

// fileDigest is a parsed digest: chunk is 0 for a plain sha256, size is -1
// when not recorded.
type fileDigest struct {
	chunk int64
	size  int64
	sum   string
}

func parseDigest(s string) (fileDigest, error) {
	if !strings.Contains(s, ":") {
		if !isHexSum(s) {
			return fileDigest{}, fmt.Errorf("the manifest's digest %q is not a sha256", s)
		}
		return fileDigest{size: -1, sum: s}, nil
	}
	parts := strings.SplitN(s, ":", 3)
	algo := parts[0]
	mib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(algo, chunkedPrefix), "MiB"))
	if !strings.HasPrefix(algo, chunkedPrefix) || !strings.HasSuffix(algo, "MiB") || err != nil || mib < 1 || mib > 1024 || chunkedName(int64(mib)<<20) != algo {
		return fileDigest{}, fmt.Errorf("the manifest's digest algorithm %q is unknown to this cryo", algo)
	}
	if len(parts) != 3 {
		return fileDigest{}, fmt.Errorf("the manifest's digest %q is malformed", s)
	}
	size, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || size < 0 || !isHexSum(parts[2]) {
		return fileDigest{}, fmt.Errorf("the manifest's digest %q is malformed", s)
	}
	return fileDigest{chunk: int64(mib) << 20, size: size, sum: parts[2]}, nil
}

func isHexSum(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
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
