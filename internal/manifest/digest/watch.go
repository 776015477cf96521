package digest

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Watcher hashes the page images of a checkpoint while CRIU is
// still writing them, so that the digests are ready moments after the dump
// instead of a second pass over tens of GB after it. CRIU writes each
// pages-N.img from start to end and never goes back, so a chunk that lies
// wholly below a file's current size is final: the watcher hashes it then.
// Finish hashes what is left (the tails, the small images) and checks that
// each early chunk still belongs to the same file (the watcher holds each
// file open, so its inode cannot be reused by a file put in its place, and
// a size that still covers the chunk); otherwise that chunk is hashed again.
type Watcher struct {
	dir  string
	stop chan struct{}
	done chan struct{}
	jobs chan watchJob
	wg   sync.WaitGroup // hashing workers

	mu      sync.Mutex
	files   map[string]*watched // by name in dir
	retired []*os.File          // files replaced under their name, closed at Stop
}

// watched is one page image and its chunks hashed so far.
type watched struct {
	f    *os.File // held open: its inode number stays its own
	ino  uint64
	next int64 // chunks [0, next) are queued or hashed
	sums map[int64][sha256.Size]byte
}

type watchJob struct {
	name string
	f    *os.File
	ino  uint64
	i    int64
}

// watchWorkers hash during the dump. Two keep up with CRIU (one sha256
// stream does 1.5-2 GB/s, CRIU writes at 2-2.5 GB/s); more only took CPU
// and memory bandwidth from the dump itself (on an H200 host, 15 workers
// made a 4 GiB dump 1.1 s slower). Finish hashes what is left on all cores.
const watchWorkers = 2

// watchInterval is how often the watcher looks at the file sizes.
const watchInterval = 20 * time.Millisecond

// Watch starts watching dir. Call Finish after the dump (or Stop if the
// dump failed).
func Watch(dir string) *Watcher {
	w := &Watcher{dir: dir, stop: make(chan struct{}), done: make(chan struct{}),
		jobs: make(chan watchJob, 1024), files: map[string]*watched{}}
	for n := min(watchWorkers, runtime.GOMAXPROCS(0)); n > 0; n-- {
		w.wg.Add(1)
		go w.worker()
	}
	go w.watch()
	return w
}

func (w *Watcher) watch() {
	defer close(w.done)
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		w.scan()
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
	}
}

// scan queues the chunks that became final since the last scan.
func (w *Watcher) scan() {
	names, _ := filepath.Glob(filepath.Join(w.dir, "pages-*.img"))
	for _, path := range names {
		st, err := os.Stat(path)
		if err != nil {
			continue
		}
		ino := st.Sys().(*syscall.Stat_t).Ino
		name := filepath.Base(path)
		w.mu.Lock()
		f := w.files[name]
		if f == nil || f.ino != ino { // new, or replaced: start over
			f = w.track(name, path, f)
		}
		if f == nil {
			w.mu.Unlock()
			continue
		}
		full := st.Size() / ChunkSize
		var queue []watchJob
		for ; f.next < full; f.next++ {
			queue = append(queue, watchJob{name: name, f: f.f, ino: f.ino, i: f.next})
		}
		w.mu.Unlock()
		for _, j := range queue {
			select {
			case w.jobs <- j:
			case <-w.stop:
				return
			}
		}
	}
}

// track opens the file at path as the watched file name, closing the one it
// replaces (old). It returns nil if the file cannot be opened. w.mu is held.
func (w *Watcher) track(name, path string, old *watched) *watched {
	if old != nil {
		w.retired = append(w.retired, old.f) // a worker may still read it
	}
	delete(w.files, name)
	fh, err := os.Open(path)
	if err != nil {
		return nil
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil
	}
	f := &watched{f: fh, ino: st.Sys().(*syscall.Stat_t).Ino, sums: map[int64][sha256.Size]byte{}}
	w.files[name] = f
	return f
}

func (w *Watcher) worker() {
	defer w.wg.Done()
	buf := make([]byte, readBufSize)
	for j := range w.jobs {
		hf := &hashFile{path: filepath.Join(w.dir, j.name), chunk: ChunkSize, sums: make([][sha256.Size]byte, j.i+1)}
		job := hashJob{f: hf, i: j.i, off: j.i * ChunkSize, n: ChunkSize}
		if err := job.runOn(j.f, buf, nil); err != nil {
			continue // Finish hashes it again and reports the error then
		}
		startWriteback(j.f, job.off, job.n)
		w.mu.Lock()
		if f := w.files[j.name]; f != nil && f.ino == j.ino {
			f.sums[j.i] = hf.sums[j.i]
		}
		w.mu.Unlock()
	}
}

// startWriteback asks the kernel to start writing a final chunk to disk now,
// without waiting for it. CRIU does not sync its images, so without this
// all of a dump's data is still dirty when the checkpoint syncs before the
// processes may go, and that sync took 2 s of a 4 GiB checkpoint on an
// H200 host. Started chunk by chunk during the dump, the disk writes
// overlap with CRIU's, and the final sync waits only for the last chunks.
// Best effort: a failure here only leaves the work to the final sync.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// Stop ends the watching and waits for the chunks in flight.
func (w *Watcher) Stop() {
	select {
	case <-w.stop:
		return
	default:
	}
	defer w.closeFiles()
	close(w.stop)
	<-w.done
	close(w.jobs)
	w.wg.Wait()
}

// closeFiles closes every file the watcher held open.
func (w *Watcher) closeFiles() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.files {
		f.f.Close()
	}
	for _, f := range w.retired {
		f.Close()
	}
	w.retired = nil
}

// Finish stops the watcher and returns the digests of every file of dir,
// as Files does, reusing the chunks hashed during the dump.
func (w *Watcher) Finish() (map[string]string, error) { return w.FinishWith(nil) }

// FinishWith is Finish, reporting to p the bytes it still has to hash
// (what the dump left unhashed).
func (w *Watcher) FinishWith(p Progress) (map[string]string, error) {
	w.Stop()
	defer w.closeFiles()
	return compute(w.dir, w.early, p)
}

// early returns the chunk sums hashed during the dump that are still valid
// for the file at path as it is now (inode ino, size bytes).
func (w *Watcher) early(rel string, ino uint64, size int64) map[int64][sha256.Size]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.files[rel]
	if f == nil || f.ino != ino || strings.Contains(rel, "/") {
		return nil
	}
	out := map[int64][sha256.Size]byte{}
	for i, s := range f.sums {
		if (i+1)*ChunkSize <= size {
			out[i] = s
		}
	}
	return out
}
