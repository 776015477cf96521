package ociimage

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// maxManifestSize bounds cryo's manifest read out of a layer.
const maxManifestSize = 16 << 20

// readForeignManifest fills sum from cryo's manifest inside the layers of
// an image that cryo did not build (Podman's checkpoint image: one layer
// holding the export, checkpoint/cryo-manifest.json among the first files
// since tar walks checkpoint/ in name order), or says in GPUsUnknown why
// it cannot. The read stops at the manifest, so the layer is not verified
// against its digest: this is for display; an unpack verifies it all.
func (st *Store) readForeignManifest(im *Image, sum *Summary) {
	want := checkpointDir + "/" + manifest.ManifestName
	for _, l := range im.Manifest.Layers {
		if strings.HasSuffix(l.MediaType, encryptedSuffix) {
			sum.GPUsUnknown = GPUsEncrypted
			return
		}
		data, err := st.readLayerFile(l, want)
		if err != nil || data == nil {
			continue
		}
		var m manifest.Manifest
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		addManifest(sum, &m)
		sum.GPUsUnknown = ""
		return
	}
	sum.GPUsUnknown = GPUsNoManifest
}

// readLayerFile reads the file name out of layer l, stopping there; nil
// when the layer has no such file.
func (st *Store) readLayerFile(l ocispec.Descriptor, name string) ([]byte, error) {
	tarStream, _, closeFn, err := st.openLayer(l, nil, nil)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	tr := tar.NewReader(tarStream)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, layerErr(l, err)
		}
		if strings.TrimPrefix(path.Clean(hdr.Name), "./") != name || hdr.Typeflag != tar.TypeReg {
			continue
		}
		if hdr.Size > maxManifestSize {
			return nil, fmt.Errorf("%s in layer %s is %d bytes: %w", name, l.Digest, hdr.Size, ErrIntegrity)
		}
		return io.ReadAll(tr)
	}
}
