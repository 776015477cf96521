package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/criuimg"
)

// maxPagesPass bounds what inspect streams a second time to read the
// command lines and environments of an archive or image whose pages it
// left as placeholders: the spans are a few pages, but reaching them
// means reading the stream up to them.
const maxPagesPass = 4 << 30

// noteNoPages says why the command lines of a large archive show [comm].
const noteNoPages = "command lines and environments not read: the archive is over 4 GiB, and its pages are not streamed a second time; extract it and inspect the directory"

// addTarCommandLines re-reads the export tar at path for the pages that
// hold its processes' command lines and environments, writes them into
// the placeholders of src, and reads the details again with them.
func addTarCommandLines(sum *Summary, path string, size int64, src *Source) {
	if sum.Details == nil {
		return
	}
	if size > maxPagesPass {
		sum.DetailsNote = noteNoPages
		return
	}
	need, err := criuimg.PageRanges(src.CRIU)
	if err != nil || len(need) == 0 {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if extractAny(f, src.CRIU, func(r io.Reader, dir string) error { return fillPages(r, dir, need) }) != nil {
		return // the details stand as read, without command lines
	}
	addDetails(sum, src.CRIU, detailsOptions(src, false))
}

// addImageCommandLines is addTarCommandLines for an image of the store:
// its pages layers (or its only layer) streamed, decrypted with dec.
func (st *Store) addImageCommandLines(sum *Summary, im *Image, criu string, dec *DecryptOptions) {
	if sum.Details == nil {
		return
	}
	var layers []ocispec.Descriptor
	var total int64
	for _, l := range im.Manifest.Layers {
		if l.Annotations[AnnLayerPart] != PartRootfs {
			layers, total = append(layers, l), total+l.Size
		}
	}
	if total > maxPagesPass {
		sum.DetailsNote = noteNoPages
		return
	}
	need, err := criuimg.PageRanges(criu)
	if err != nil || len(need) == 0 {
		return
	}
	for _, l := range layers {
		r, _, closeFn, err := st.openLayerOrPages(l, dec)
		if err != nil {
			return
		}
		err = fillPages(r, criu, need)
		closeFn()
		if err != nil {
			return
		}
	}
	addDetails(sum, criu, criuimg.Options{StatsDirs: []string{filepath.Dir(criu)}})
}

// fillPages copies, from a tar stream of an export layout, the spans need
// names of each checkpoint/pages-N.img into that placeholder in criuDir.
func fillPages(r io.Reader, criuDir string, need map[string][]criuimg.Range) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		spans, ok := need[path.Base(name)]
		if !ok || path.Dir(name) != checkpointDir || hdr.Typeflag != tar.TypeReg {
			continue
		}
		if err := fillFile(tr, filepath.Join(criuDir, path.Base(name)), spans, hdr.Size); err != nil {
			return err
		}
	}
}

// fillFile reads r (one pages image) up to each span in turn and writes
// the span at its offset into the image's placeholder.
func fillFile(r io.Reader, file string, spans []criuimg.Range, size int64) error {
	sort.Slice(spans, func(i, j int) bool { return spans[i].Off < spans[j].Off })
	// A pages layer that the first pass skipped has no placeholder yet:
	// it is created sparse, at its size, owner-only.
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	var pos int64
	for _, s := range spans {
		if s.Off < pos || s.Len <= 0 || s.Off+s.Len > size {
			continue // a span already copied, or past the image's end
		}
		if _, err := io.CopyN(io.Discard, r, s.Off-pos); err != nil {
			return err
		}
		b := make([]byte, s.Len)
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		if _, err := f.WriteAt(b, s.Off); err != nil {
			return err
		}
		pos = s.Off + s.Len
	}
	return nil
}

// openLayerOrPages is openLayer, and for a pages blob (rawpages.go) a tar
// stream of its one file, so that both read the same way.
func (st *Store) openLayerOrPages(l ocispec.Descriptor, dec *DecryptOptions) (io.Reader, func() error, func(), error) {
	if l.MediaType != MediaTypeCheckpointPages {
		return st.openLayer(l, dec, nil)
	}
	name, err := partFile(l)
	if err != nil {
		return nil, nil, nil, err
	}
	f, err := os.Open(st.blobPath(l))
	if err != nil {
		return nil, nil, nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: l.Size})
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	closeFn := func() { pr.Close(); f.Close() }
	return pr, func() error { return nil }, closeFn, nil
}
