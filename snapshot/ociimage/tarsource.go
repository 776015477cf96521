package ociimage

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"

	"github.com/cryo-gpu/cryo/snapshot/archive"
)

var (
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
	gzipMagic = []byte{0x1f, 0x8b}
)

// openExportTar extracts a Podman/CRI-O export (plain, gzip or zstd tar)
// into a private directory under tmp and opens it.
func openExportTar(path, tmp string) (*Source, error) {
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
	if err := extractAny(f, dir); err != nil {
		cleanup()
		return nil, fmt.Errorf("extract checkpoint archive %s: %w", path, err)
	}
	if isOCILayout(dir) {
		return openLayoutCheckpoint(context.Background(), dir, tmp, cleanup)
	}
	if !isCRIUDir(dir + "/" + checkpointDir) {
		cleanup()
		return nil, fmt.Errorf("%s has no checkpoint/ with CRIU images; remedy: give a `podman container checkpoint --export` archive: %w", path, ErrUnknownSource)
	}
	return openExportDir(dir, cleanup)
}

// extractAny extracts a tar that may be gzip- or zstd-compressed.
func extractAny(r io.Reader, dir string) error {
	br := bufio.NewReaderSize(r, 1<<20)
	head, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(head, zstdMagic):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		return archive.Extract(zr, dir)
	case bytes.HasPrefix(head, gzipMagic):
		gr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gr.Close()
		return archive.Extract(gr, dir)
	default:
		return archive.Extract(br, dir)
	}
}

func gzipReader(r io.Reader) (io.Reader, func(), error) {
	gr, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, fmt.Errorf("gzip layer: %w", err)
	}
	return gr, func() { gr.Close() }, nil
}
