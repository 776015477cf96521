package ociimage

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/klauspost/compress/zstd"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/report"
)

var (
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
	gzipMagic = []byte{0x1f, 0x8b}
)

// openExportTar extracts a Podman/CRI-O export (plain, gzip or zstd tar)
// into a private directory under tmp and opens it. With skeleton, memory
// pages and the rootfs diff are created with their sizes but not read:
// enough to summarise the checkpoint, not to build or restore it.
func openExportTar(path, tmp string, skeleton bool) (*Source, error) {
	if skeleton {
		return openExportTarWith(path, tmp, func(r io.Reader, dir string) error { return archive.ExtractSkeleton(r, dir, isBulk) })
	}
	// A build stores the pages files as blobs: hash them as they land.
	var ps *pageSums
	s, err := openExportTarWith(path, tmp, func(r io.Reader, dir string) error {
		ps = newPageSums(dir)
		return archive.ExtractWith(context.Background(), r, dir, archive.Options{Tee: ps.tee})
	})
	if ps != nil {
		sums := ps.sums() // even on failure: it ends the hashes
		if s != nil && s.sums == nil {
			s.sums = sums
		}
	}
	return s, err
}

// openExportTarWith is openExportTar with its extraction.
func openExportTarWith(path, tmp string, extract func(io.Reader, string) error) (*Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint archive: %w", err)
	}
	defer f.Close()
	dir, err := os.MkdirTemp(tmp, "cryo-export-")
	if err != nil {
		return nil, fmt.Errorf("extract checkpoint archive: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := extractAny(f, dir, extract); err != nil {
		cleanup()
		return nil, fmt.Errorf("extract checkpoint archive %s: %w", path, err)
	}
	if isOCILayout(dir) {
		return openLayoutCheckpoint(context.Background(), dir, tmp, cleanup)
	}
	if !isCRIUDir(dir + "/" + checkpointDir) {
		cleanup()
		return nil, report.WithRemedy(fmt.Errorf("%s has no checkpoint/ with CRIU images: %w", path, ErrUnknownSource), "give a `podman container checkpoint --export` archive")
	}
	return openExportDir(dir, cleanup)
}

// extractAny extracts a tar that may be gzip- or zstd-compressed.
func extractAny(r io.Reader, dir string, extract func(io.Reader, string) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	head, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(head, zstdMagic):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		return extract(zr, dir)
	case bytes.HasPrefix(head, gzipMagic):
		gr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gr.Close()
		return extract(gr, dir)
	default:
		return extract(br, dir)
	}
}

// isBulk: the entries of an export whose content a summary does not need,
// only their size: CRIU's memory pages and the container's rootfs diff.
func isBulk(name string) bool {
	base := path.Base(name)
	return isPages(base) || base == RootfsDiffName
}

func gzipReader(r io.Reader) (io.Reader, func(), error) {
	gr, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, fmt.Errorf("gzip layer: %w", err)
	}
	return gr, func() { gr.Close() }, nil
}
