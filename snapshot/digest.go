package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// A digest in Manifest.Digests is one of:
//
//   - "sha256-chunked-<N>MiB:<size>:<hex>", written by this cryo: the file
//     (<size> bytes) is cut into chunks of N MiB, the last one shorter (an
//     empty file is one empty chunk), and <hex> is the sha256 of the
//     concatenated 32-byte sha256 digests of its chunks, in file order. The
//     chunks are hashed in parallel, so a large file takes a fraction of the
//     time of one sha256 stream. With coreutils (for a non-empty file):
//     split -b 16M F c. && for c in c.*; do sha256sum $c | cut -c1-64; done | xxd -r -p | sha256sum
//   - "<hex>": the plain sha256 of the file, written by format version 1.
//
// VerifyDigests reads both.
const (
	// DigestChunkSize is the chunk size of the digests that ComputeDigests
	// writes: small enough that the chunks of one pages image keep every
	// core busy, large enough that the chunk digests are a small hash.
	DigestChunkSize = 16 << 20
	chunkedPrefix   = "sha256-chunked-"
)

// readBufSize is each worker's read buffer: large reads, yet small enough
// to stay in cache while sha256 consumes them. A variable for the benchmark.
var readBufSize = 512 << 10

// DigestAlgorithm returns the algorithm name that ComputeDigests records.
func DigestAlgorithm() string { return chunkedName(DigestChunkSize) }

func chunkedName(chunk int64) string { return fmt.Sprintf("%s%dMiB", chunkedPrefix, chunk>>20) }

// ComputeDigests returns the digest of every file of the image directory
// dir but the manifest and logs (which change after the dump: CRIU writes
// its restore log there), in the chunked format above. The chunks of all
// files are hashed in parallel, GOMAXPROCS at a time: the pages of a GPU
// checkpoint run to tens of GB.
func ComputeDigests(dir string) (map[string]string, error) {
	return computeDigests(dir, nil)
}

// earlySums returns chunk sums already known for the file rel of dir (inode
// ino, size bytes), or nil.
type earlySums func(rel string, ino uint64, size int64) map[int64][sha256.Size]byte

// computeDigests is ComputeDigests, hashing only the chunks that early
// does not already know.
func computeDigests(dir string, early earlySums) (map[string]string, error) {
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
		work[i] = &hashFile{path: path, size: st.Size(), chunk: DigestChunkSize}
		if early != nil {
			work[i].known = early(f, st.Sys().(*syscall.Stat_t).Ino, st.Size())
		}
	}
	hashAll(work)
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

// VerifyDigests checks the files of dir against m.Digests: each listed file
// must be there with its digest, and every CRIU image file (*.img) must be
// listed. The error is a *CorruptFileError naming a bad file, or ErrCorrupt
// when the manifest has no digests (the checkpoint never finished). The
// cheap checks (a file missing, of the wrong size, or not covered) come
// before any file is read; then all files are hashed in parallel.
func VerifyDigests(dir string, m *Manifest) error {
	if m.Digests == nil {
		return fmt.Errorf("%s: the manifest has no file digests, so the checkpoint did not finish; remedy: `cryo checkpoint --finish %s` completes it if CRIU's dump did (a restore does so itself), else re-take the checkpoint: %w", dir, dir, errors.Join(ErrIncomplete, ErrCorrupt))
	}
	if err := confined(dir, m.Digests); err != nil {
		return err
	}
	names := make([]string, 0, len(m.Digests))
	for name := range m.Digests {
		names = append(names, name)
	}
	sort.Strings(names)
	work := make([]*hashFile, len(names))
	for i, name := range names {
		want, err := parseDigest(m.Digests[name])
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
	if err := uncovered(dir, m.Digests); err != nil {
		return err
	}
	hashAll(work)
	for i, name := range names {
		w := work[i]
		if w.err != nil {
			return &CorruptFileError{File: name, Reason: w.err.Error()}
		}
		if have := w.sum(); have != w.want {
			return &CorruptFileError{File: name, Reason: fmt.Sprintf("sha256 mismatch (want %.12s…, have %.12s…)", w.want, have)}
		}
	}
	return nil
}

// confined refuses a digest name that could reach a file outside dir: an
// absolute name, a ".." component, or a symlink on the way. The manifest
// travels with the image, so its names are as untrusted as its files; and
// ComputeDigests never records a name through a symlink.
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

// hashFile is one file to hash: in chunks of chunk bytes, or whole when
// chunk is 0. size is the file's size when the hashing began; the file
// must still end there.
type hashFile struct {
	path  string
	size  int64
	chunk int64
	want  string                      // for VerifyDigests
	known map[int64][sha256.Size]byte // chunk sums hashed earlier (DigestWatcher)

	sums [][sha256.Size]byte // one per chunk (one for a plain sha256)
	mu   sync.Mutex
	err  error
}

func (f *hashFile) chunks() int64 {
	if f.chunk == 0 || f.size == 0 {
		return 1
	}
	return (f.size + f.chunk - 1) / f.chunk
}

// sum is the file's digest in hex, of its algorithm.
func (f *hashFile) sum() string {
	if f.chunk == 0 {
		return hex.EncodeToString(f.sums[0][:])
	}
	h := sha256.New()
	for _, c := range f.sums {
		h.Write(c[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// digest is the file's digest as recorded in the manifest.
func (f *hashFile) digest() string {
	if f.chunk == 0 {
		return f.sum()
	}
	return fmt.Sprintf("%s:%d:%s", chunkedName(f.chunk), f.size, f.sum())
}

func (f *hashFile) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

// hashJob is one chunk of one file.
type hashJob struct {
	f     *hashFile
	i     int64 // chunk index
	off   int64
	n     int64
	final bool // the file's last chunk: check that the file ends there
}

// maxHashWorkers bounds the goroutines (and read buffers) of one hashAll on
// a large host: by then memory bandwidth, not cores, is the limit.
const maxHashWorkers = 64

// hashAll fills the sums (or err) of every file, hashing the chunks of all
// files on GOMAXPROCS goroutines (at most maxHashWorkers), the longest jobs first.
func hashAll(files []*hashFile) {
	var jobs []hashJob
	for _, f := range files {
		n := f.chunks()
		f.sums = make([][sha256.Size]byte, n)
		for i := int64(0); i < n; i++ {
			if sum, ok := f.known[i]; ok && i < n-1 {
				f.sums[i] = sum // the last chunk is always read: it checks the file's end
				continue
			}
			j := hashJob{f: f, i: i, n: f.size, final: i == n-1}
			if f.chunk != 0 {
				j.off = i * f.chunk
				j.n = min(f.chunk, f.size-j.off)
			}
			jobs = append(jobs, j)
		}
	}
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].n > jobs[b].n })
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.GOMAXPROCS(0), maxHashWorkers, len(jobs)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, readBufSize)
			for {
				k := next.Add(1) - 1
				if k >= int64(len(jobs)) {
					return
				}
				j := jobs[k]
				if err := j.run(buf); err != nil {
					j.f.fail(err)
				}
			}
		}()
	}
	wg.Wait()
}

// run hashes bytes [off, off+n) of the file with pread, and for the last
// chunk checks that the file ends at its size: a file that grew or shrank
// while it was hashed is an error, not a digest of half a file.
func (j hashJob) run(buf []byte) error {
	f, err := os.Open(j.f.path)
	if err != nil {
		return err
	}
	defer f.Close()
	return j.runOn(f, buf)
}

// runOn is run on an open file.
func (j hashJob) runOn(f *os.File, buf []byte) error {
	// Ask for the whole chunk at once: on a cold page cache (a restore on a
	// fresh node) the kernel then reads it in large requests instead of
	// ramping its readahead up chunk by chunk. It is only advice.
	_ = unix.Fadvise(int(f.Fd()), j.off, j.n, unix.FADV_WILLNEED)
	h := sha256.New()
	for off, end := j.off, j.off+j.n; off < end; {
		b := buf[:min(int64(len(buf)), end-off)]
		k, err := f.ReadAt(b, off)
		h.Write(b[:k])
		off += int64(k)
		if err == io.EOF && off < end {
			return fmt.Errorf("read %s: the file shrank to %d bytes while it was hashed", j.f.path, off)
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read %s: %w", j.f.path, err)
		}
	}
	if j.final {
		if k, _ := f.ReadAt(buf[:1], j.off+j.n); k != 0 {
			return fmt.Errorf("read %s: the file grew past %d bytes while it was hashed", j.f.path, j.off+j.n)
		}
	}
	h.Sum(j.f.sums[j.i][:0])
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
