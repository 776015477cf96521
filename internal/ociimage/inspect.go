package ociimage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// InspectPath summarizes a checkpoint directory or export tar, with the
// details of its CRIU images (Summary.Details). A Podman or CRI-O export
// is read for its metadata only: its memory pages and rootfs diff are
// counted, not extracted, so its command lines are not read (comm shows).
func InspectPath(path string) (*Summary, error) { return InspectPathWith(path, InspectOptions{}) }

// InspectOptions tunes InspectPathWith and InspectLocalWith.
type InspectOptions struct {
	// Decrypt decrypts an encrypted image's small layers (nil: its
	// details are not read).
	Decrypt *DecryptOptions
	// CommandLines: an archive or image whose pages are read as
	// placeholders is streamed a second time for the few pages that hold
	// the command lines and environments (up to maxPagesPass).
	CommandLines bool
}

// InspectPathWith is InspectPath with options.
func InspectPathWith(path string, o InspectOptions) (*Summary, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("inspect checkpoint %s: %w", path, err)
	}
	if p, perr := manifest.ReadPartial(path); st.IsDir() && (p != nil || perr != nil) {
		return partialSummary(path, p, perr)
	}
	src, err := openSource(path, os.TempDir(), true)
	if errors.Is(err, ErrUnknownSource) && hasManifestFile(path) {
		// cryo's manifest without CRIU's inventory: a run interrupted
		// before its dump completed, which Summarize names.
		src, err = openProcessDir(path)
	}
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if err := requireReadableManifest(path, src); err != nil {
		return nil, err
	}
	sum, err := Summarize(src)
	if err != nil {
		return nil, err
	}
	sum.Source = path
	if isImageDir(src) {
		sum.Kind = KindImageDir
	}
	note := sum.DetailsNote
	addDetails(sum, src.CRIU, detailsOptions(src, !st.IsDir()))
	if !st.IsDir() && o.CommandLines {
		addTarCommandLines(sum, path, st.Size(), src)
	}
	if note != "" {
		sum.DetailsNote = note
	}
	addContainerMeta(sum, src)
	return sum, nil
}

func hasManifestFile(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, manifest.ManifestName))
	return err == nil
}

// requireReadableManifest refuses a checkpoint whose cryo manifest is
// there but cannot be read: opening a source reads it leniently (a
// checkpoint without one was taken without cryo), but a damaged one must
// not pass for that.
func requireReadableManifest(path string, src *Source) error {
	if src.Manifest != nil || !hasManifestFile(src.CRIU) {
		return nil
	}
	if _, err := manifest.Read(src.CRIU); err != nil {
		return fmt.Errorf("inspect checkpoint %s: %w", path, err)
	}
	return nil
}

// InspectLocalWith summarizes an image of the store from its manifest, and
// its CRIU images from the layers that hold them (the rootfs diff and the
// pages layers are not read); for an image that cryo did not build (`podman
// container checkpoint --create-image`), cryo's manifest inside its layer is
// read up to that file only. The options give the keys that decrypt an
// encrypted image, and whether its command lines are read.
func (st *Store) InspectLocalWith(ctx context.Context, ref string, o InspectOptions) (*Summary, error) {
	im, err := st.LoadImage(ctx, ref)
	if err != nil {
		return nil, err
	}
	sum := FromManifest(im.Manifest)
	sum.Source, sum.Digest = ref+" (local store)", im.Desc.Digest.String()
	if sum.Created.IsZero() && im.Config.Created != nil {
		sum.Created = im.Config.Created.UTC()
		sum.Checkpointed = sum.Created
	}
	if !builtByCryo(im.Manifest.Annotations) {
		st.readForeignManifest(im, sum)
	}
	st.addImageDetails(sum, im, o)
	return sum, nil
}

// InspectRemote summarizes an image in a registry from its manifest alone:
// no layer is pulled, so the summary has no Details, and an image that cryo
// did not build has its GPU needs unknown (GPUsPullToRead).
func InspectRemote(ctx context.Context, ref string, o RemoteOptions) (*Summary, error) {
	m, d, err := remoteManifest(ctx, ref, o)
	if err != nil {
		return nil, err
	}
	sum := FromManifest(*m)
	sum.Source, sum.Digest = ref+" (registry)", d.Digest.String()
	sum.DetailsNote = fmt.Sprintf("read from the registry's manifest alone; the process tree, files, sockets, mounts and CRIU statistics are in its layers: `cryo image pull %s`, then inspect it again", ref)
	return sum, nil
}

// FromManifest reads back the summary that Build put in the annotations.
func FromManifest(m ocispec.Manifest) *Summary {
	a := m.Annotations
	sum := &Summary{Kind: imageKind(a), Name: cmp.Or(a[AnnName], a[AnnCRIUContainerName], a[AnnPodmanName]),
		BaseImage: cmp.Or(a[AnnCRIURootfsImage], a[AnnPodmanRootfsImage]), Host: a[AnnHost],
		Driver: a[AnnGPUDriver], Annotation: a}
	sum.Created, _ = time.Parse(time.RFC3339, a[AnnOCICreated])
	sum.Versions = Versions{Cryo: a[AnnCryoVersion], CRIU: a[AnnCRIUVersion], Kernel: a[AnnKernel], Driver: a[AnnGPUDriver]}
	sum.CUDA, _ = strconv.Atoi(a[AnnCUDAVersion])
	sum.Processes = parseProcesses(a[AnnProcesses])
	sum.GPUs = parseGPUs(a)
	if c, ok := a[AnnGPUCount]; ok && sum.GPUs == nil {
		sum.GPUsUnknown = fmt.Sprintf("the image's GPU count annotation %q is unreadable", c)
	}
	if !builtByCryo(a) {
		sum.GPUsUnknown = GPUsPullToRead
	}
	sum.Checkpointed = sum.Created
	sum.Sizes = Sizes{GPUMemory: atoi(a[AnnSizeGPU]), HostMemory: atoi(a[AnnSizeHost]),
		RootfsDiff: atoi(a[AnnSizeRootfs]), Total: atoi(a[AnnSizeTotal])}
	for _, l := range m.Layers {
		sum.Sizes.Compressed += l.Size
		sum.Encrypted = sum.Encrypted || strings.HasSuffix(l.MediaType, encryptedSuffix)
		sum.Layers = append(sum.Layers, LayerInfo{Part: l.Annotations[AnnLayerPart], MediaType: l.MediaType, Digest: l.Digest.String(), Size: l.Size})
	}
	sum.Sizes.Other = max(0, sum.Sizes.Total-sum.Sizes.GPUMemory-sum.Sizes.HostMemory-sum.Sizes.RootfsDiff)
	sum.Sizes.Ratio = ratio(sum.Sizes.Total, sum.Sizes.Compressed)
	return sum
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func parseProcesses(s string) []ProcessInfo {
	var out []ProcessInfo
	for _, part := range strings.Split(s, ",") {
		pid, comm, ok := strings.Cut(part, ":")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(pid)
		p := ProcessInfo{PID: n, Comm: strings.TrimSuffix(comm, "*"), CUDA: strings.HasSuffix(comm, "*")}
		out = append(out, p)
	}
	return out
}

// maxGPUCount bounds the GPU count read from annotations: they come from
// any registry, and a count is turned into a slice.
const maxGPUCount = 1024

// parseGPUs rebuilds the needs from the annotations: count GPUs of one model
// sharing the memory evenly (the annotations keep the total). A count that
// is not a number in 1..maxGPUCount reads as none: inspect shows what the
// image claims, and a restore checks cryo's own manifest, not these.
func parseGPUs(a map[string]string) []manifest.GPUNeed {
	count, err := strconv.Atoi(a[AnnGPUCount])
	if err != nil || count <= 0 || count > maxGPUCount {
		return nil
	}
	mem, _ := strconv.ParseUint(a[AnnGPUMemory], 10, 64)
	out := make([]manifest.GPUNeed, count)
	for i := range out {
		out[i] = manifest.GPUNeed{Name: a[AnnGPUModel], ComputeCapability: a[AnnGPUCompute], Memory: mem / uint64(count)}
	}
	return out
}
