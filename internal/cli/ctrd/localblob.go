package ctrd

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// contentBlobs is the blobs directory of containerd's content store on
// this host, from the path that its metadata plugin exports
// (ROOT/io.containerd.metadata.v1.bolt/meta.db); "" when containerd does
// not say, and the blobs are read through its API.
func contentBlobs(ctx context.Context, c *client.Client) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.IntrospectionService().Plugins(ctx, "type==io.containerd.metadata.v1")
	if err != nil {
		return ""
	}
	for _, p := range resp.Plugins {
		if path := p.Exports["path"]; path != "" {
			return filepath.Join(filepath.Dir(filepath.Dir(path)), "io.containerd.content.v1.content", "blobs")
		}
	}
	return ""
}

// openLocalBlob opens blob d as containerd's own file of it, when this
// process can read that file: a read of the file costs what the bytes do,
// where a read through containerd's API is a call per read. Only a
// regular file of d's size is taken, and the caller verifies what it reads
// against d's digest, as it does through the API; nil: read through the
// API. The caller has already opened d through the API, so the blob is
// one of its namespace's.
func openLocalBlob(blobs string, d ocispec.Descriptor) io.ReadCloser {
	if blobs == "" || d.Digest.Validate() != nil {
		return nil
	}
	f, err := os.Open(filepath.Join(blobs, d.Digest.Algorithm().String(), d.Digest.Encoded()))
	if err != nil {
		return nil
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != d.Size {
		f.Close()
		return nil
	}
	return readCloser{bufio.NewReaderSize(f, blobReadSize), f}
}
