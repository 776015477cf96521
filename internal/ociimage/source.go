package ociimage

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Kind is where a checkpoint came from; it decides how it is restored.
type Kind string

// Source kinds.
const (
	KindProcess    Kind = "process"    // `cryo checkpoint --dir`
	KindPodman     Kind = "podman"     // a Podman or CRI-O export
	KindContainerd Kind = "containerd" // `ctr container checkpoint`
	// KindKubelet is the kubelet's checkpoint (CRI CheckpointContainer)
	// as containerd's CRI plugin writes it: a Podman-like archive, but
	// with checkpointctl's config.dump and CRI's status.dump, which
	// Podman cannot restore.
	KindKubelet Kind = "kubelet"
)

// Source is a checkpoint laid out as its image will hold it: Root has
// checkpoint/ (the CRIU images, cryo's manifest included) and, for
// containers, config.dump, spec.dump and rootfs-diff.tar.
type Source struct {
	Kind      Kind
	Root      string
	CRIU      string // the directory of the CRIU images
	Name      string // container name, or "pid N"
	BaseImage string // the image the container was created from, if any
	Runtime   string
	Manifest  *manifest.Manifest // nil for a checkpoint cryo did not take
	Files     []archive.Entry
	cleanup   func()
	// sums: the digests of the pages files that cryo's own extraction
	// took as it wrote them (extractsums.go), by path.
	sums map[string]fileSum
}

// Close removes what opening the source extracted.
func (s *Source) Close() {
	if s.cleanup != nil {
		s.cleanup()
	}
}

// OpenSource opens a checkpoint directory or export tar. A directory holding
// inventory.img is a `cryo checkpoint --dir` directory; one holding
// checkpoint/ is an extracted export; an OCI image layout is a containerd
// checkpoint exported with `ctr image export`; a file is a Podman or CRI-O
// export tar (plain, gzip or zstd) or a `ctr image export` tar, extracted
// safely under tmp. A checkpoint still in containerd is opened with
// ctrd.Open, which lays it out with OpenContainerdIndex.
func OpenSource(path, tmp string) (*Source, error) { return openSource(path, tmp, false) }

func openSource(path, tmp string, skeleton bool) (*Source, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint %s: %w", path, err)
	}
	if !st.IsDir() {
		return openExportTar(path, tmp, skeleton)
	}
	if isCRIUDir(path) {
		return openProcessDir(path)
	}
	if isCRIUDir(filepath.Join(path, checkpointDir)) {
		return openExportDir(path, nil)
	}
	if isOCILayout(path) {
		return openLayoutCheckpoint(context.Background(), path, tmp, nil)
	}
	return nil, report.WithRemedy(fmt.Errorf("%s holds neither CRIU images (inventory.img) nor checkpoint/ nor an exported containerd checkpoint: %w", path, ErrUnknownSource), "give a `cryo checkpoint --dir` directory, a Podman export tar, a `ctr image export` of a containerd checkpoint, or a containerd checkpoint image with --containerd")
}

func isCRIUDir(dir string) bool {
	ok, err := manifest.IsImageDir(dir)
	return err == nil && ok
}

// openProcessDir maps a bare-process image directory under checkpoint/.
func openProcessDir(dir string) (*Source, error) {
	files, err := listFiles(dir, checkpointDir)
	if err != nil {
		return nil, err
	}
	s := &Source{Kind: KindProcess, Root: dir, CRIU: dir, Files: files, Manifest: readManifest(dir), Name: "process"}
	if s.Manifest != nil {
		s.Name = s.Manifest.ContainerID
	}
	return s, nil
}

// openExportDir opens an extracted Podman/CRI-O export (or a directory
// that cryo laid out the same way from a containerd checkpoint).
func openExportDir(root string, cleanup func()) (*Source, error) {
	files, err := listFiles(root, "")
	if err != nil {
		return nil, err
	}
	criu := filepath.Join(root, checkpointDir)
	s := &Source{Kind: KindPodman, Root: root, CRIU: criu, Files: files, cleanup: cleanup, Manifest: readManifest(criu)}
	readExportMeta(s)
	return s, nil
}

func readManifest(dir string) *manifest.Manifest {
	m, err := manifest.Read(dir)
	if err != nil {
		return nil
	}
	return m
}

// exportConfig is the part of config.dump (Podman's container config,
// checkpointctl's ContainerConfig, or cryo's ContainerdMeta) that the image
// annotations need.
type exportConfig struct {
	metadata.ContainerConfig
	RawImageName string `json:"rawImageName"` // Podman's
	CryoKind     Kind   `json:"cryoKind"`     // cryo's
}

func readExportMeta(s *Source) {
	data, err := os.ReadFile(filepath.Join(s.Root, configDumpName))
	if err != nil {
		return
	}
	var c exportConfig
	if json.Unmarshal(data, &c) != nil {
		return
	}
	s.Name = cmp.Or(c.Name, c.ID)
	s.BaseImage = cmp.Or(c.RootfsImageName, c.RawImageName)
	s.Runtime = c.OCIRuntime
	switch {
	case c.CryoKind != "":
		s.Kind = c.CryoKind
	case isKubeletExport(s.Root, c):
		s.Kind = KindKubelet
	}
}

// isKubeletExport tells containerd's CRI archive from a Podman or CRI-O
// export: its config.dump names a containerd runtime type
// (io.containerd.runc.v2, io.containerd.cryo.v2) where Podman and CRI-O
// name an OCI runtime binary, and it carries CRI's container status
// (status.dump).
func isKubeletExport(root string, c exportConfig) bool {
	if !strings.HasPrefix(c.OCIRuntime, "io.containerd.") {
		return false
	}
	_, err := os.Stat(filepath.Join(root, statusDumpName))
	return err == nil
}

// listFiles lists the regular files under dir as archive entries named
// prefix/rel, refusing anything but files, directories and symlinks to
// nothing (CRIU writes none).
func listFiles(dir, prefix string) ([]archive.Entry, error) {
	var out []archive.Entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file; a checkpoint holds only files: %w", p, ErrUnknownSource)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, archive.Entry{Name: filepath.ToSlash(filepath.Join(prefix, rel)), Path: p})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if err != nil {
		return nil, fmt.Errorf("list checkpoint files: %w", err)
	}
	return out, nil
}

// Files lists the files of an unpacked image directory as archive entries.
func Files(dir string) ([]archive.Entry, error) { return listFiles(dir, "") }
