// Package archive reads and writes the tar streams of checkpoint images.
// Extraction is defensive: a checkpoint image may come from any registry,
// and CRIU later runs as root on what was extracted, so an entry that could
// write outside the target directory, or create a device, is refused.
package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrUnsafeEntry is wrapped by every refusal of a tar entry.
var ErrUnsafeEntry = errors.New("unsafe tar entry")

// UnsafeEntryError names the refused entry and why.
type UnsafeEntryError struct {
	Name   string
	Reason string
}

func (e *UnsafeEntryError) Error() string { return report.Render(e.Cause(), e.RemedyText()) }

// Cause is the message without the remedy (report.Remedied).
func (e *UnsafeEntryError) Cause() string {
	return fmt.Sprintf("tar entry %q refused: %s", e.Name, e.Reason)
}

// RemedyText is the remedy alone (report.Remedied).
func (e *UnsafeEntryError) RemedyText() string {
	return "the image was not built by cryo or was tampered with, rebuild it from the checkpoint"
}

// Unwrap makes errors.Is(err, ErrUnsafeEntry) true.
func (e *UnsafeEntryError) Unwrap() error { return ErrUnsafeEntry }

// Checkpoint data is process memory, secrets included: files are written
// for the owner only, whatever mode the tar says.
const (
	FileMode = 0o600
	DirMode  = 0o700
)

// ErrTooLarge: the entries would leave less than ReserveBytes free on the
// file system of the target directory.
var ErrTooLarge = errors.New("tar expands beyond the free space")

// ReserveBytes is the free space that extraction leaves on the target's file
// system: a small compressed layer can expand to any size (zeros compress
// a thousandfold), and filling the disk would hurt every tenant of the host.
// Since the bound is the free space left, it holds across the layers of one
// image as well.
var ReserveBytes int64 = 1 << 30

// Budget bounds what the extractions that share it may write: the bytes
// an image's manifest records for its files, across all of its layers. A
// registry may serve any layer under a manifest, so the record is checked
// as the bytes come, not trusted.
type Budget struct {
	Left   int64  // bytes still allowed
	Source string // where the bound comes from, for the error
	// MaxEntries bounds the entries of all the tars together (0: no
	// bound but each tar's Limits), so that an image cannot spread
	// entries over many layers each under the cap.
	MaxEntries int
	entries    int
}

// Extract writes the entries of the tar stream r under dir, which must
// exist. It refuses absolute names, names with "..", symlinks whose target
// is absolute or has a ".." component, writes through an existing symlink,
// devices or fifos, a tar beyond DefaultLimits, and content beyond the
// free space of dir's file system less ReserveBytes.
func Extract(r io.Reader, dir string) error {
	return ExtractWith(context.Background(), r, dir, Options{})
}

// ExtractWithin is Extract, also bounded by b (nil: no bound but the free
// space), which it draws down.
func ExtractWithin(r io.Reader, dir string, b *Budget) error {
	return ExtractWith(context.Background(), r, dir, Options{Budget: b})
}

// Options bound an extraction beyond Extract's checks.
type Options struct {
	Budget *Budget // nil: no bound but the free space
	Limits Limits  // zero fields: the defaults
	Part   string  // names the tar in a LimitError
	// Tee, when set, is asked for each regular file, by its entry name
	// and with the file just created for it, and given a copy of its bytes
	// as they are written where it returns a writer: so that a caller that
	// hashes what it extracted needn't read it back from the disk. A Tee's
	// write error fails the extraction.
	Tee func(name string, f *os.File) io.Writer
}

// ExtractWith is Extract with o's bounds. It stops when ctx ends, between
// entries and within one, and returns ctx's cause.
func ExtractWith(ctx context.Context, r io.Reader, dir string, o Options) error {
	return extract(ctx, r, dir, o, nil)
}

// ExtractSkeleton is Extract for a reader that needs the layout and the
// small files only (`cryo inspect`): a regular file for which bulk(name)
// is true is created empty with its recorded size (sparse: no byte of it is
// read into or written to disk), so that an archive of many GiB is
// summarised for the cost of its metadata.
func ExtractSkeleton(r io.Reader, dir string, bulk func(name string) bool) error {
	return extract(context.Background(), r, dir, Options{}, bulk)
}

func extract(ctx context.Context, r io.Reader, dir string, o Options, bulk func(string) bool) error {
	room, err := freeBytes(dir)
	if err != nil {
		return err
	}
	lim := newLimiter(o.Limits, o.Part)
	tr := tar.NewReader(ctxReader{ctx: ctx, r: r})
	for {
		if ctx.Err() != nil {
			return fmt.Errorf("extraction stopped after %d entries: %w", lim.entries, context.Cause(ctx))
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return stopped(ctx, corrupt(fmt.Errorf("read tar: %w", err)))
		}
		if err := lim.check(hdr.Name, hdr.Linkname); err != nil {
			return err
		}
		if err := lim.checkImage(o.Budget, hdr.Name); err != nil {
			return err
		}
		if bulk != nil && hdr.Typeflag == tar.TypeReg && bulk(hdr.Name) {
			if err := placeholder(hdr, dir); err != nil {
				return err
			}
			continue
		}
		if err := charge(hdr, dir, &room, o.Budget); err != nil {
			return err
		}
		if err := extractEntry(tr, hdr, dir, o.Tee); err != nil {
			return stopped(ctx, err)
		}
	}
}

// stopped is err, or ctx's cause when ctx ended the read that failed.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("extraction stopped: %w", context.Cause(ctx))
	}
	return err
}

// charge counts an entry against the free space and the budget before any
// of its bytes is written: hdr.Size is what the entry will write (a sparse
// file's holes included), and HeaderCost its metadata.
func charge(hdr *tar.Header, dir string, room *int64, b *Budget) error {
	if hdr.Size < 0 {
		return &UnsafeEntryError{Name: hdr.Name, Reason: "negative size"}
	}
	cost := hdr.Size + HeaderCost
	if *room -= cost; *room < 0 {
		return report.WithRemedy(fmt.Errorf("tar entry %q (%d bytes) would leave less than %d bytes free in %s: %w", hdr.Name, hdr.Size, ReserveBytes, dir, ErrTooLarge), "free space there, or do not restore this image if it is not expected to be this large")
	}
	if b == nil {
		return nil
	}
	if hdr.Typeflag != tar.TypeReg {
		cost = HeaderCost // a link's or directory's size is no content
	}
	if b.Left -= cost; b.Left < 0 {
		return &UnsafeEntryError{Name: hdr.Name, Reason: fmt.Sprintf("its %d bytes (%d of them for its header) go beyond the %s", cost, HeaderCost, b.Source)}
	}
	return nil
}

// freeBytes is what extraction may write into dir: the space available to
// this user on its file system, less ReserveBytes. dir may not exist yet
// (entries create their parents): its nearest existing parent tells.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	p := dir
	for {
		err := unix.Statfs(p, &st)
		if err == nil {
			return int64(st.Bavail)*int64(st.Bsize) - ReserveBytes, nil
		}
		if parent := filepath.Dir(p); err == unix.ENOENT && parent != p {
			p = parent
			continue
		}
		return 0, fmt.Errorf("extract into %s: %w", dir, err)
	}
}

func extractEntry(tr *tar.Reader, hdr *tar.Header, dir string, tee func(string, *os.File) io.Writer) error {
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	target := filepath.Join(dir, filepath.FromSlash(rel))
	if err := noSymlinkParents(dir, rel, hdr.Name); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return mkdir(target)
	case tar.TypeReg:
		var w func(*os.File) io.Writer
		if tee != nil {
			w = func(f *os.File) io.Writer { return tee(hdr.Name, f) }
		}
		return writeFile(tr, target, hdr.Size, w)
	case tar.TypeSymlink:
		return symlink(hdr, rel, target)
	case tar.TypeLink:
		return hardlink(hdr, dir, target)
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return &UnsafeEntryError{Name: hdr.Name, Reason: fmt.Sprintf("type %q (device, fifo or unknown) is not allowed", string(hdr.Typeflag))}
	}
}

// cleanName returns the entry's name relative to the target, refusing
// absolute names and any ".." component (even one that stays inside:
// a well-formed checkpoint never has one).
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", &UnsafeEntryError{Name: name, Reason: "absolute path"}
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", &UnsafeEntryError{Name: name, Reason: "path traversal (..)"}
		}
	}
	return path.Clean(name), nil
}

// noSymlinkParents refuses an entry whose parent directories include a
// symlink: writing through it could land outside dir.
func noSymlinkParents(dir, rel, name string) error {
	cur := dir
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, p)
		st, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return &UnsafeEntryError{Name: name, Reason: "a parent directory is a symlink"}
		}
	}
	return nil
}

// placeholder creates a bulk entry as a sparse file of its size; the tar
// reader skips its content at the next entry.
func placeholder(hdr *tar.Header, dir string) error {
	if hdr.Size < 0 {
		return &UnsafeEntryError{Name: hdr.Name, Reason: "negative size"}
	}
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if err := noSymlinkParents(dir, rel, hdr.Name); err != nil {
		return err
	}
	target := filepath.Join(dir, filepath.FromSlash(rel))
	if err := writeFile(strings.NewReader(""), target, 0, nil); err != nil {
		return err
	}
	if err := os.Truncate(target, hdr.Size); err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	return nil
}

func mkdir(target string) error {
	if err := os.MkdirAll(target, DirMode); err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	return nil
}

// copyBuf is the size of one write of an extracted file: large, so that a
// checkpoint's GiB of pages cost few system calls.
const copyBuf = 1 << 20

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBuf); return &b }}

func writeFile(r io.Reader, target string, size int64, tee func(*os.File) io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(target), DirMode); err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	// O_EXCL with a prior remove: never follow a symlink planted at target.
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("extract: %w", err)
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, FileMode)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	var w io.Writer = f
	if tee != nil {
		if t := tee(f); t != nil {
			w = io.MultiWriter(f, t)
		}
	}
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(onlyWriter{w}, r, *buf)
	copyBufs.Put(buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return corrupt(fmt.Errorf("extract %s: %w", filepath.Base(target), err))
	}
	if n != size {
		return corrupt(fmt.Errorf("extract %s: %d of %d bytes: %w", filepath.Base(target), n, size, io.ErrUnexpectedEOF))
	}
	return nil
}

// onlyWriter hides the file's ReadFrom, which would copy through a buffer
// of its own (32 KiB) instead of copyBuf.
type onlyWriter struct{ io.Writer }

// ErrCorrupt: the archive ends inside an entry or holds what is no tar
// header: a copy cut short, or a file that is not a tar at all.
var ErrCorrupt = errors.New("truncated or corrupt archive")

// corrupt gives a truncated or garbage archive its remedy; any other
// error (a full disk, a cancelled read) is returned as it is.
func corrupt(err error) error {
	if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, tar.ErrHeader) {
		return err
	}
	return report.WithRemedy(fmt.Errorf("%w (%w)", err, ErrCorrupt),
		"the archive is cut short or is not a tar: copy it again (its size and sha256 should match the original's), or export the checkpoint again")
}

// symlink allows only relative targets without a ".." component. A
// lexical check of where a target resolves is not enough: through other
// links (S1 -> ., S2 -> S1/..) "S2/x" is outside although "S1/../x" is not.
// Without "..", every link leads down from its own directory, which is
// inside dir, so no chain of links, in any order of creation, leads out.
func symlink(hdr *tar.Header, rel, target string) error {
	if path.IsAbs(hdr.Linkname) {
		return &UnsafeEntryError{Name: hdr.Name, Reason: "symlink to an absolute path " + hdr.Linkname}
	}
	for _, part := range strings.Split(hdr.Linkname, "/") {
		if part == ".." {
			return &UnsafeEntryError{Name: hdr.Name, Reason: "symlink target with .. (could lead out of the directory through other links): " + hdr.Linkname}
		}
	}
	resolved := path.Join(path.Dir(rel), hdr.Linkname)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return &UnsafeEntryError{Name: hdr.Name, Reason: "symlink escapes the directory: " + hdr.Linkname}
	}
	if err := os.MkdirAll(filepath.Dir(target), DirMode); err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	return os.Symlink(hdr.Linkname, target)
}

// hardlink allows only a link to a regular file extracted before.
func hardlink(hdr *tar.Header, dir, target string) error {
	src, err := cleanName(hdr.Linkname)
	if err != nil {
		return &UnsafeEntryError{Name: hdr.Name, Reason: "hard link to " + hdr.Linkname}
	}
	if err := noSymlinkParents(dir, src, hdr.Name); err != nil {
		return err
	}
	srcPath := filepath.Join(dir, filepath.FromSlash(src))
	st, err := os.Lstat(srcPath)
	if err != nil || !st.Mode().IsRegular() {
		return &UnsafeEntryError{Name: hdr.Name, Reason: "hard link to a missing or non-regular file " + hdr.Linkname}
	}
	return os.Link(srcPath, target)
}
