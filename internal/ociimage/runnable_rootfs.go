package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// deletedFilesName is Podman's and the kubelet's list of the paths the
// container deleted (a JSON array).
const deletedFilesName = "deleted.files"

func hostArch() string { return goruntime.GOARCH }

// buildRootfsLayer writes the container's changes as an OCI layer: the
// rootfs diff's entries (containerd's and the kubelet's are layer tars
// already, Podman's a tar of the changed files), plus a whiteout for each
// deleted path, gzip-compressed (every runtime unpacks gzip). A checkpoint
// without changes gets an empty layer, so that every runnable image has
// the same shape.
func (st *Store) buildRootfsLayer(src *Source, o BuildOptions) (ocispec.Descriptor, digest.Digest, error) {
	f, err := os.CreateTemp(st.blobDir(), ".build-*")
	if err != nil {
		return ocispec.Descriptor{}, "", fmt.Errorf("create the rootfs layer: %w", err)
	}
	defer os.Remove(f.Name())
	packed := newDigestCounter()
	zw := gzip.NewWriter(multi(f, packed))
	plain := newDigestCounter()
	err = writeRootfsTar(multi(zw, plain), src.Root)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ocispec.Descriptor{}, "", fmt.Errorf("write the rootfs layer: %w", err)
	}
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: packed.Digest(), Size: packed.n,
		Annotations: map[string]string{AnnLayerPart: PartRootfsLayer}}
	if err := os.Rename(f.Name(), st.blobPath(d)); err != nil {
		return d, "", fmt.Errorf("store the rootfs layer: %w", err)
	}
	if o.Log != nil {
		o.Log("layer %-6s %s  %s", PartRootfsLayer, d.Digest.Encoded()[:12], human(d.Size))
	}
	return d, plain.Digest(), nil
}

// writeRootfsTar writes the layer tar of the checkpoint rooted at root.
func writeRootfsTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	if err := copyDiff(tw, filepath.Join(root, RootfsDiffName)); err != nil {
		return err
	}
	deleted, err := readDeleted(filepath.Join(root, deletedFilesName))
	if err != nil {
		return err
	}
	for _, p := range deleted {
		dir, base := path.Split(strings.TrimPrefix(path.Clean("/"+p), "/"))
		if base == "" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: dir + ".wh." + base, Typeflag: tar.TypeReg, Mode: 0o600}); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyDiff copies the entries of the rootfs diff (plain or compressed).
func copyDiff(tw *tar.Writer, p string) error {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := compression.DecompressStream(f)
	if err != nil {
		return fmt.Errorf("read %s: %w", RootfsDiffName, err)
	}
	defer r.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", RootfsDiffName, err)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

func readDeleted(p string) ([]string, error) {
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var paths []string
	if err := json.Unmarshal(data, &paths); err != nil {
		return nil, fmt.Errorf("read %s: %w", deletedFilesName, err)
	}
	return paths, nil
}
