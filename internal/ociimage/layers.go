package ociimage

import (
	"path"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// layerPlan is the files of one layer.
type layerPlan struct {
	Part    string
	Entries []archive.Entry
}

// planLayers splits the files into disjoint layers: the small files
// (CRIU's metadata, the manifest, config.dump, spec.dump) in one, the
// rootfs diff in its own, and each pages file of at least splitAt bytes in
// its own. Disjoint layers stack into the export's layout, as Podman
// expects, while the big parts transfer in parallel and an unchanged part
// keeps its digest and is not sent again.
func planLayers(files []archive.Entry, size func(archive.Entry) int64, splitAt int64) []layerPlan {
	base := layerPlan{Part: PartBase}
	var rootfs, pages []layerPlan
	for _, f := range files {
		switch {
		case f.Name == RootfsDiffName:
			rootfs = append(rootfs, layerPlan{Part: PartRootfs, Entries: []archive.Entry{f}})
		case isPages(path.Base(f.Name)) && splitAt > 0 && size(f) >= splitAt:
			pages = append(pages, layerPlan{Part: PartPages, Entries: []archive.Entry{f}})
		default:
			base.Entries = append(base.Entries, f)
		}
	}
	return append(append([]layerPlan{base}, rootfs...), pages...)
}
