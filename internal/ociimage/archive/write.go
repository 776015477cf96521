package archive

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Entry is one file to write: Name inside the archive (slash-separated),
// Path on this host.
type Entry struct {
	Name string
	Path string
}

// epoch is the mtime of every entry: the same files give the same bytes,
// so an unchanged layer keeps its digest and is not sent twice.
var epoch = time.Unix(0, 0).UTC()

// Write writes entries (regular files) as a tar stream, with the parent
// directories first, in name order, owned by root, mode 0600/0700.
func Write(w io.Writer, entries []Entry) error {
	sorted := append([]Entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, e := range sorted {
		if err := writeDirs(tw, dirs, path.Dir(e.Name)); err != nil {
			return err
		}
		if err := writeOne(tw, e); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeDirs(tw *tar.Writer, seen map[string]bool, dir string) error {
	if dir == "." || dir == "/" || seen[dir] {
		return nil
	}
	if err := writeDirs(tw, seen, path.Dir(dir)); err != nil {
		return err
	}
	seen[dir] = true
	hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimSuffix(dir, "/") + "/", Mode: DirMode, ModTime: epoch, Format: tar.FormatPAX}
	return tw.WriteHeader(hdr)
}

func writeOne(tw *tar.Writer, e Entry) error {
	f, err := os.Open(e.Path)
	if err != nil {
		return fmt.Errorf("archive %s: %w", e.Name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("archive %s: %w", e.Name, err)
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.Name, Size: st.Size(), Mode: FileMode, ModTime: epoch, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive %s: %w", e.Name, err)
	}
	// A file that shrinks or grows while it is read would corrupt the stream.
	n, err := io.Copy(tw, io.LimitReader(f, st.Size()))
	if err == nil && n != st.Size() {
		err = fmt.Errorf("file changed while archived (%d of %d bytes)", n, st.Size())
	}
	if err != nil {
		return fmt.Errorf("archive %s: %w", e.Name, err)
	}
	return nil
}
