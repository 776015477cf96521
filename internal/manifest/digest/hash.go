package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// hashFile is one file to hash: in chunks of chunk bytes, or whole when
// chunk is 0. size is the file's size when the hashing began; the file
// must still end there.
type hashFile struct {
	path  string
	size  int64
	chunk int64
	want  string                      // for Verify
	known map[int64][sha256.Size]byte // chunk sums hashed earlier (Watcher)

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

// Progress receives the bytes that a hashing reads: the total before the
// first read, then every read as it lands. A *progress.Task is one.
type Progress interface {
	SetTotal(n int64)
	Add(n int64)
}

// hashAll fills the sums (or err) of every file, hashing the chunks of all
// files on GOMAXPROCS goroutines (at most maxHashWorkers), the longest jobs
// first, and reports the bytes read to p (nil: none).
func hashAll(files []*hashFile, p Progress) {
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
	if p != nil {
		var total int64
		for _, j := range jobs {
			total += j.n
		}
		p.SetTotal(total)
	}
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
				if err := j.run(buf, p); err != nil {
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
func (j hashJob) run(buf []byte, p Progress) error {
	f, err := os.Open(j.f.path)
	if err != nil {
		return err
	}
	defer f.Close()
	return j.runOn(f, buf, p)
}

// runOn is run on an open file.
func (j hashJob) runOn(f *os.File, buf []byte, p Progress) error {
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
		if p != nil {
			p.Add(int64(k))
		}
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
