package ociimage

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// KindImageDir is a container's bare CRIU image directory with no export
// around it: `ctr task checkpoint --image-path DIR` through cryo's shim, or
// runc's own. Inspect shows it; it is never an image's kind.
const KindImageDir Kind = "container-images"

// SpecMount is one mount of the container's OCI spec (spec.dump).
type SpecMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type,omitempty"`
	Source      string   `json:"source,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// addContainerMeta fills what an export's config.dump and spec.dump say
// about the container (checkpointctl's ContainerConfig and the OCI spec),
// and the container id of cryo's manifest. Each file is optional: a bare
// process has neither.
func addContainerMeta(sum *Summary, src *Source) {
	if m := src.Manifest; m != nil && !strings.HasPrefix(m.ContainerID, "pid ") {
		sum.ContainerID = m.ContainerID
	}
	sum.Runtime = src.Runtime
	if c, ok := readConfigDump(src.Root); ok {
		if !strings.HasPrefix(c.ID, "pid ") { // a bare process's export names no container
			sum.ContainerID = cmp.Or(c.ID, sum.ContainerID)
		}
		if !c.CreatedTime.IsZero() {
			t := c.CreatedTime.UTC()
			sum.ContainerCreated = &t
		}
		if sum.Created.IsZero() && !c.CheckpointedAt.IsZero() {
			sum.Created = c.CheckpointedAt.UTC()
		}
	}
	if sp, ok := readSpecDump(src.Root); ok {
		addSpec(sum, sp)
	}
	sum.Checkpointed = sum.Created
}

func readConfigDump(root string) (exportConfig, bool) {
	var c exportConfig
	data, err := os.ReadFile(filepath.Join(root, configDumpName))
	return c, err == nil && json.Unmarshal(data, &c) == nil
}

func readSpecDump(root string) (*rspec.Spec, bool) {
	var sp rspec.Spec
	data, err := os.ReadFile(filepath.Join(root, SpecDumpName))
	return &sp, err == nil && json.Unmarshal(data, &sp) == nil
}

// addSpec takes the container's annotations, environment and mounts from
// its spec, and gives each bind mount of the CRIU details its host path.
func addSpec(sum *Summary, sp *rspec.Spec) {
	if len(sp.Annotations) > 0 {
		sum.ContainerAnnotations = sp.Annotations
	}
	if sp.Process != nil {
		sum.Env = sp.Process.Env
	}
	for _, m := range sp.Mounts {
		sum.Mounts = append(sum.Mounts, SpecMount{Destination: m.Destination, Type: m.Type, Source: m.Source, Options: m.Options})
	}
	if sum.Details == nil {
		return
	}
	for i := range sum.Details.Mounts {
		cm := &sum.Details.Mounts[i]
		if sm, ok := bindFor(sum.Mounts, cm.MountPoint); ok {
			cm.HostSource = sm.Source
		}
	}
}

// bindFor finds the spec's bind mount at CRIU's mountpoint (which CRIU
// may record relative to the root, "./data").
func bindFor(mounts []SpecMount, mountpoint string) (SpecMount, bool) {
	mp := path.Clean("/" + strings.TrimPrefix(mountpoint, "."))
	for _, m := range mounts {
		bind := m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
		if bind && path.Clean(m.Destination) == mp {
			return m, true
		}
	}
	return SpecMount{}, false
}

// addInterruption says what a checkpoint whose run did not finish holds
// (manifest.UnfinishedState), so that inspect names its remedy.
func addInterruption(sum *Summary, src *Source) {
	if !sum.Unfinished {
		return
	}
	st, err := manifest.UnfinishedState(src.CRIU, src.Manifest)
	if err != nil {
		sum.DetailsNote = fmt.Sprintf("its dump's state could not be read: %v", err)
		return
	}
	sum.Interruption, sum.Finishable = st, st == manifest.DumpComplete
	if st == manifest.DumpNotStarted {
		sum.DetailsNote = "no CRIU images: the run stopped before CRIU's dump wrote them"
	}
}

// isImageDir tells a container's bare CRIU image directory from a
// process's: cryo's manifest names a container (a bare process is "pid
// N"), or, without a manifest, the dump has its own mount namespace.
func isImageDir(src *Source) bool {
	if src.Kind != KindProcess {
		return false
	}
	if m := src.Manifest; m != nil {
		return m.ContainerID != "" && !strings.HasPrefix(m.ContainerID, "pid ")
	}
	ns, _ := filepath.Glob(filepath.Join(src.CRIU, "mountpoints-*.img"))
	return len(ns) > 0
}

// partialSummary describes a directory marked partial: no images, the
// failure its mark records, and whether the dump had completed before it
// (manifest.PartialState). A mark that cannot be read is an error.
func partialSummary(path string, p *manifest.Partial, err error) (*Summary, error) {
	if err != nil {
		return nil, report.WithRemedy(fmt.Errorf("inspect checkpoint %s: its mark %s cannot be read (%v): %w", path, manifest.PartialName, err, manifest.ErrCorrupt), "re-take the checkpoint into an empty directory")
	}
	sum := &Summary{Source: path, Kind: KindProcess, Unfinished: true, Partial: p,
		Interruption: manifest.PartialState(path), GPUsUnknown: "the checkpoint failed and its images were removed",
		DetailsNote: "its CRIU images were removed when it failed; CRIU's logs are kept in the directory"}
	files, err := listFiles(path, "")
	if err != nil {
		return nil, err
	}
	if err := sumSizes(&Source{Files: files}, &sum.Sizes); err != nil {
		return nil, err
	}
	return sum, nil
}
