package ociimage

import (
	"fmt"
	"os"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/report"
)

// detailsOptions says where a source's CRIU statistics may be (an export
// keeps them at its root, runc under Podman in its work path) and whether
// its pages are placeholders.
func detailsOptions(src *Source, noPages bool) criuimg.Options {
	o := criuimg.Options{StatsDirs: []string{src.Root}, NoPages: noPages}
	if src.Manifest != nil && src.Manifest.CRIUWorkDir != "" {
		o.StatsDirs = append(o.StatsDirs, src.Manifest.CRIUWorkDir)
	}
	return o
}

// addDetails reads the CRIU images of dir into sum. Images that cannot be
// read leave the rest of the summary standing: the note says why.
func addDetails(sum *Summary, dir string, o criuimg.Options) {
	d, err := criuimg.Read(dir, o)
	if err != nil {
		sum.DetailsNote = "the CRIU images could not be read: " + err.Error()
		return
	}
	sum.Details = d
}

// addImageDetails extracts the small files of an image (its CRIU metadata
// and cryo's manifest) into a private temporary directory and reads them.
// The rootfs and pages layers are skipped; a single-layer image (Podman's)
// is streamed with its pages and rootfs diff left as placeholders. The
// pages that hold the command lines and environments are then filled in
// from a second pass (addImageCommandLines) when o asks for them. An
// encrypted layer is decrypted with dec, as it streams: nothing of it is
// written in plaintext but those small files, removed on return.
func (st *Store) addImageDetails(sum *Summary, im *Image, o InspectOptions) {
	dec := o.Decrypt
	if IsRunnable(im.Manifest.Annotations) {
		if err := VerifyParts(im.Config, im.Manifest, true); err != nil {
			sum.DetailsNote = report.Render(fmt.Sprintf("its checkpoint parts were not read: %v", err), RemedyParts)
			return
		}
	}
	tmp, err := os.MkdirTemp("", "cryo-inspect-")
	if err != nil {
		sum.DetailsNote = "no room to read the CRIU images: " + err.Error()
		return
	}
	defer os.RemoveAll(tmp)
	for _, l := range im.Manifest.Layers {
		if part := l.Annotations[AnnLayerPart]; part == PartRootfs || part == PartPages {
			continue
		}
		if strings.HasSuffix(l.MediaType, encryptedSuffix) && dec == nil {
			sum.DetailsNote = fmt.Sprintf("the image is encrypted: its CRIU images are read with its key (`cryo inspect --decryption-key KEY %s`)", im.Ref)
			return
		}
		if err := st.extractSmall(l, tmp, dec); err != nil {
			// A note in the summary, not an error: its remedy reads as a
			// failure's would.
			sum.DetailsNote = report.Render(fmt.Sprintf("layer %s could not be read (%v)", l.Digest, err), "`cryo inspect --verify "+im.Ref+"`")
			return
		}
	}
	criu := CRIUDir(tmp)
	src := &Source{Kind: sum.Kind, Root: tmp, CRIU: criu, Manifest: readManifest(criu)}
	if src.Manifest != nil {
		fillVersions(&sum.Versions, src.Manifest)
	}
	addDetails(sum, criu, criuimg.Options{StatsDirs: []string{tmp}, NoPages: true})
	if o.CommandLines {
		st.addImageCommandLines(sum, im, criu, dec)
	}
	readExportMeta(src)
	addContainerMeta(sum, src)
}

// extractSmall extracts one layer blob (decrypted with dec when it is
// encrypted), writing pages and the rootfs diff as placeholders of their
// size.
func (st *Store) extractSmall(l ocispec.Descriptor, dir string, dec *DecryptOptions) error {
	r, _, closeFn, err := st.openLayer(l, dec, nil)
	if err != nil {
		return err
	}
	defer closeFn()
	// The free space of the temporary directory bounds what is written.
	return archive.ExtractSkeleton(r, dir, isBulk)
}

// fillVersions completes versions the annotations lacked (an image built
// before they were annotated) from cryo's manifest inside the image.
func fillVersions(v *Versions, m *manifest.Manifest) {
	fill := func(dst *string, src string) {
		if *dst == "" {
			*dst = src
		}
	}
	fill(&v.Cryo, m.CryoVersion)
	fill(&v.CRIU, m.CRIUVersion)
	fill(&v.Kernel, m.Kernel)
	fill(&v.Driver, m.Inventory.DriverVersion)
}
