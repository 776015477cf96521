package ociimage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
	"oras.land/oras-go/v2/content"
)

// fileSum is the digest and size of a file as cryo's extraction wrote it,
// and the inode it was written to: a later entry of the same name (a link
// in its place, say) makes another file, which the sum does not describe.
type fileSum struct {
	digest digest.Digest
	size   int64
	dev    uint64
	ino    uint64
}

// pageSums hashes the pages files of a layout while the extraction writes
// them, on a goroutine of each file's own, beside the reader that verifies
// the archive. The build then stores each file as a blob by a hard link
// without reading it again: a pass over the checkpoint's bytes saved, and
// the two hashes of the rest run side by side instead of one after the
// other.
type pageSums struct {
	dir  string // where the extraction writes: entry names are under it
	mu   sync.Mutex
	open map[string]*pendingSum // by the extracted file's path
}

// pendingSum is one file's hash under way, and the file, held open.
type pendingSum struct {
	h   *asyncDigest
	fd  int
	res *fileSum
}

// end waits for the hash, takes the file's device and inode (no digest
// where it cannot) and closes it; later calls return the same.
func (p *pendingSum) end() fileSum {
	if p.res == nil {
		s := p.h.sum()
		var st unix.Stat_t
		if unix.Fstat(p.fd, &st) != nil {
			s.digest = ""
		}
		s.dev, s.ino = st.Dev, st.Ino
		unix.Close(p.fd)
		p.res = &s
	}
	return *p.res
}

func newPageSums(dir string) *pageSums {
	return &pageSums{dir: dir, open: map[string]*pendingSum{}}
}

// tee is archive.Options.Tee: a writer for each pages file, nil for the
// rest. It keeps the file open (a duplicate descriptor) until sums, so
// that its inode cannot be freed and reused while the extraction runs: a
// later entry of the same name that puts another file there is then seen.
func (p *pageSums) tee(name string, f *os.File) io.Writer {
	if !isPages(path.Base(name)) {
		return nil
	}
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil
	}
	d := &pendingSum{h: newAsyncDigest(), fd: fd}
	file := filepath.Join(p.dir, filepath.FromSlash(path.Clean(name)))
	p.mu.Lock()
	if old := p.open[file]; old != nil {
		old.end() // a second entry of one name: the last one counts
	}
	p.open[file] = d
	p.mu.Unlock()
	return d.h
}

// sums waits for every hash and returns those of the files still at their
// paths, by path. Call it once the extraction is over, failed or not: it
// ends the hashes' goroutines and closes their files.
func (p *pageSums) sums() map[string]fileSum {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]fileSum, len(p.open))
	for file, d := range p.open {
		if s := d.end(); s.describes(file) {
			out[file] = s
		}
	}
	return out
}

// describes reports whether file is the very file the sum was taken of:
// its device and inode (a hard link of it shares them; a copy does not)
// and its size.
func (s fileSum) describes(file string) bool {
	var st unix.Stat_t
	return s.digest != "" && unix.Stat(file, &st) == nil && st.Dev == s.dev && st.Ino == s.ino && st.Size == s.size
}

// asyncDigest hashes what is written to it on its own goroutine. A write
// copies the bytes into one of a few buffers and returns, so that hashing
// overlaps with the writer's own work; sum waits for the rest.
type asyncDigest struct {
	work chan []byte
	free chan []byte
	done chan struct{}
	d    *digestCounter
	res  *fileSum
}

const (
	asyncBufs    = 4
	asyncBufSize = 1 << 20
)

func newAsyncDigest() *asyncDigest {
	a := &asyncDigest{work: make(chan []byte, asyncBufs), free: make(chan []byte, asyncBufs),
		done: make(chan struct{}), d: newDigestCounter()}
	for range asyncBufs {
		a.free <- make([]byte, asyncBufSize)
	}
	go a.run()
	return a
}

func (a *asyncDigest) run() {
	defer close(a.done)
	for b := range a.work {
		a.d.Write(b)
		a.free <- b[:cap(b)]
	}
}

func (a *asyncDigest) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		b := <-a.free
		k := copy(b, p)
		a.work <- b[:k]
		p = p[k:]
	}
	return n, nil
}

// sum ends the hash and returns its digest and size; later calls return
// the same.
func (a *asyncDigest) sum() fileSum {
	if a.res == nil {
		close(a.work)
		<-a.done
		a.res = &fileSum{digest: a.d.Digest(), size: a.d.n}
	}
	return *a.res
}

// blobVerifier reads a blob and checks it against its descriptor, as
// oras-go's content.VerifyReader does, but hashes on a goroutine of its
// own: the extraction that reads a checkpoint's CRIU tar then writes its
// files while the tar's digest is computed beside it. Close ends the hash
// and closes the blob.
type blobVerifier struct {
	r    *io.LimitedReader
	base io.ReadCloser
	d    ocispec.Descriptor
	h    *asyncDigest
	err  error
}

func newBlobVerifier(r io.ReadCloser, d ocispec.Descriptor) *blobVerifier {
	return &blobVerifier{r: &io.LimitedReader{R: r, N: d.Size}, base: r, d: d, h: newAsyncDigest()}
}

func (v *blobVerifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	if errors.Is(err, io.EOF) && v.r.N > 0 {
		err = io.ErrUnexpectedEOF
	}
	v.err = err
	return n, err
}

// Verify checks that the blob was read to its end, holds no byte beyond
// its size, and has its digest.
func (v *blobVerifier) Verify() error {
	if v.r.N > 0 {
		if v.err != nil && !errors.Is(v.err, io.EOF) {
			return v.err
		}
		return fmt.Errorf("%d bytes of the blob left unread: %w", v.r.N, io.ErrUnexpectedEOF)
	}
	if n, _ := v.base.Read(make([]byte, 1)); n > 0 {
		return fmt.Errorf("the blob is longer than its %d bytes: %w", v.d.Size, content.ErrTrailingData)
	}
	if got := v.h.sum(); got.digest != v.d.Digest {
		return fmt.Errorf("digest %s, want %s: %w", got.digest, v.d.Digest, content.ErrMismatchedDigest)
	}
	return nil
}

func (v *blobVerifier) Close() error {
	v.h.sum()
	return v.base.Close()
}
