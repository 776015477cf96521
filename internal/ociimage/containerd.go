package ociimage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/containerd/v2/pkg/protobuf/proto"
	ptypes "github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"oras.land/oras-go/v2/content"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Index annotations that containerd's clients write on a checkpoint index.
const (
	ctrdAnnImageName   = "image.name"                           // `ctr task checkpoint`
	ctrdAnnRuntime     = "io.containerd.checkpoint.runtime"     // `ctr container checkpoint`
	ctrdAnnSnapshotter = "io.containerd.checkpoint.snapshotter" // `ctr container checkpoint`
	ctrdCheckpointName = "containerd.io/checkpoint/"            // ctr's default name prefix: containerd.io/checkpoint/ID:DATE
)

// AnnContainerdRuntime is the runtime type of a containerd checkpoint.
const AnnContainerdRuntime = annPrefix + "containerd.runtime"

// ContainerdMeta is config.dump for a checkpoint that came from containerd:
// checkpointctl's ContainerConfig (id, name, rootfsImageName, rootfsImage,
// runtime, createdTime, checkpointedTime), which checkpointctl and
// containerd's CRI plugin read, plus what a restore needs besides the CRIU
// images, the spec and the rw diff. Its ContainerConfig's fields hold: ID
// and Name the container's; RootfsImageName the base image reference and
// RootfsImage its manifest or index digest at checkpoint; OCIRuntime the
// containerd runtime type; CreatedTime when the container was created and
// CheckpointedAt when it was checkpointed.
type ContainerdMeta struct {
	metadata.ContainerConfig
	CryoKind        Kind   `json:"cryoKind"`
	Namespace       string `json:"namespace,omitempty"`
	Snapshotter     string `json:"snapshotter,omitempty"`
	CheckpointImage string `json:"checkpointImage,omitempty"` // the containerd image it was built from
}

// ctrdCheckpoint is a containerd checkpoint index, read.
type ctrdCheckpoint struct {
	ref   string // its image name
	index ocispec.Index
	open  BlobOpener
	meta  ContainerdMeta
	sums  map[string]fileSum // the pages files' digests, by extracted path
}

// layoutContainerd lays a containerd checkpoint out as an export directory
// under root: checkpoint/ (the CRIU tar, extracted safely), spec.dump (the
// container's OCI spec), rootfs-diff.tar (the rw layer, uncompressed, with
// its whiteouts) and config.dump (ContainerdMeta). Every blob is verified
// against its digest as it is read.
func layoutContainerd(ctx context.Context, ck *ctrdCheckpoint, root string) error {
	var criu, spec, rw *ocispec.Descriptor
	for i := range ck.index.Manifests {
		d := &ck.index.Manifests[i]
		switch mt := d.MediaType; {
		case mt == images.MediaTypeContainerd1Checkpoint:
			criu = d
		case mt == images.MediaTypeContainerd1CheckpointConfig:
			spec = d
		case mt == images.MediaTypeContainerd1CheckpointPreDump:
			return report.WithRemedy(fmt.Errorf("%s is an incremental checkpoint (it has a pre-dump): cryo packs full checkpoints only: %w", ck.ref, ErrUnknownSource), "checkpoint without --parent")
		case images.IsLayerType(mt) || mt == images.MediaTypeContainerd1RW:
			rw = d
		case images.IsManifestType(mt) || images.IsIndexType(mt):
			ck.meta.RootfsImage = d.Digest.String()
		}
	}
	if criu == nil {
		return report.WithRemedy(fmt.Errorf("%s has no CRIU images (%s): it is not a containerd checkpoint, or the checkpoint was taken with --image-path: %w", ck.ref, images.MediaTypeContainerd1Checkpoint, ErrUnknownSource), "give the image that `ctr task checkpoint` or `ctr container checkpoint --task` printed")
	}
	if err := ck.extractCRIU(ctx, *criu, filepath.Join(root, checkpointDir)); err != nil {
		return err
	}
	if spec == nil {
		return report.WithRemedy(fmt.Errorf("%s carries no container spec (%s): %w", ck.ref, images.MediaTypeContainerd1CheckpointConfig, ErrUnknownSource), "re-take the checkpoint with containerd ≥ 1.7")
	}
	if err := ck.writeSpec(ctx, *spec, filepath.Join(root, SpecDumpName)); err != nil {
		return err
	}
	if rw != nil {
		if err := ck.writeRW(ctx, *rw, filepath.Join(root, RootfsDiffName)); err != nil {
			return err
		}
	}
	ck.fillMeta(readManifest(filepath.Join(root, checkpointDir)))
	return writeJSONFile(filepath.Join(root, configDumpName), ck.meta)
}

// fillMeta takes the names that the index annotations carry, and the
// times: checkpointctl prints a zero time as 0001-01-01.
func (ck *ctrdCheckpoint) fillMeta(man *manifest.Manifest) {
	m, a := &ck.meta, ck.index.Annotations
	m.CryoKind, m.CheckpointImage = KindContainerd, ck.ref
	m.RootfsImageName = cmp.Or(m.RootfsImageName, a[ctrdAnnImageName], a[ocispec.AnnotationRefName])
	m.OCIRuntime = cmp.Or(m.OCIRuntime, a[ctrdAnnRuntime])
	m.Snapshotter = cmp.Or(m.Snapshotter, a[ctrdAnnSnapshotter])
	if m.ID == "" {
		// ctr's default reference (containerd.io/checkpoint/ID:DATE) names
		// the container, and so does the shim's manifest; any other
		// reference is the user's choice, named after nothing.
		m.ID = CheckpointContainerID(ck.ref)
		if !IsCtrCheckpointName(ck.ref) {
			m.ID = cmp.Or(manifestContainerID(man), m.ID)
		}
	}
	m.Name = cmp.Or(m.Name, m.ID)
	if m.CheckpointedAt.IsZero() && man != nil {
		m.CheckpointedAt = man.Created.UTC()
	}
	// Without the container record (a checkpoint exported to another
	// host) its creation is unknown; the checkpoint time bounds it.
	if m.CreatedTime.IsZero() {
		m.CreatedTime = m.CheckpointedAt
	}
}

// manifestContainerID is the container id in cryo's manifest; a bare
// process's ("pid N") names no container.
func manifestContainerID(m *manifest.Manifest) string {
	if m == nil || strings.HasPrefix(m.ContainerID, "pid ") {
		return ""
	}
	return m.ContainerID
}

// IsCtrCheckpointName reports whether ref is ctr's default name of a
// checkpoint, which carries the container's id.
func IsCtrCheckpointName(ref string) bool { return strings.HasPrefix(ref, ctrdCheckpointName) }

// CheckpointContainerID reads the container id out of ctr's default
// checkpoint name (containerd.io/checkpoint/ID:DATE), or names the
// checkpoint after the last path element of its reference.
func CheckpointContainerID(ref string) string {
	if rest, ok := strings.CutPrefix(ref, ctrdCheckpointName); ok {
		// Container ids hold no ':'; the date does ("01-02-2006-15:04").
		id, _, _ := strings.Cut(rest, ":")
		return id
	}
	name := path.Base(ref)
	if i := strings.LastIndexAny(name, ":@"); i > 0 {
		name = name[:i]
	}
	return name
}

// verifying reads a blob and checks it against its descriptor at EOF.
type verifying interface {
	io.Reader
	Verify() error
}

// openVerified opens a blob whose bytes are checked against d at EOF;
// with aside, hashed on a goroutine of its own (blobVerifier), for a large
// blob whose reader has work of its own to do.
func (ck *ctrdCheckpoint) openVerified(ctx context.Context, d ocispec.Descriptor, aside bool) (verifying, io.Closer, error) {
	rc, err := ck.open(ctx, d)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s blob %s of %s: %w", d.MediaType, d.Digest, ck.ref, err)
	}
	if aside && d.Digest.Algorithm() == digest.SHA256 && d.Digest.Validate() == nil {
		bv := newBlobVerifier(rc, d)
		return bv, bv, nil
	}
	return content.NewVerifyReader(rc, d), rc, nil
}

func (ck *ctrdCheckpoint) verifyErr(d ocispec.Descriptor, vr verifying, err error) error {
	if err == nil {
		err = vr.Verify()
	}
	if err != nil {
		return fmt.Errorf("blob %s (%s) of %s: %v: %w", d.Digest, d.MediaType, ck.ref, err, ErrIntegrity)
	}
	return nil
}

// extractCRIU extracts the CRIU tar with cryo's safe extractor, hashing
// the pages files on the way (ck.sums) while the tar's own digest is
// computed beside it (blobVerifier): the checkpoint's bytes are read once
// and written once, and no hash waits for another.
func (ck *ctrdCheckpoint) extractCRIU(ctx context.Context, d ocispec.Descriptor, dir string) error {
	vr, c, err := ck.openVerified(ctx, d, true)
	if err != nil {
		return err
	}
	defer c.Close()
	ps := newPageSums(dir)
	err = archive.ExtractWith(ctx, vr, dir, archive.Options{Tee: ps.tee})
	ck.sums = ps.sums()
	if err != nil {
		if errors.Is(err, archive.ErrUnsafeEntry) {
			return fmt.Errorf("CRIU tar of %s: %w", ck.ref, err)
		}
		return ck.verifyErr(d, vr, err)
	}
	_, err = io.Copy(io.Discard, vr)
	return ck.verifyErr(d, vr, err)
}

// readSmall reads a blob of at most limit bytes whole, verified against d.
func (ck *ctrdCheckpoint) readSmall(ctx context.Context, d ocispec.Descriptor, what string, limit int64) ([]byte, error) {
	if d.Size > limit {
		return nil, fmt.Errorf("%s %s of %s is %d bytes: %w", what, d.Digest, ck.ref, d.Size, ErrIntegrity)
	}
	vr, c, err := ck.openVerified(ctx, d, false)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	data, err := io.ReadAll(vr)
	if err := ck.verifyErr(d, vr, err); err != nil {
		return nil, err
	}
	return data, nil
}

// writeSpec decodes containerd's checkpoint config (a protobuf Any around
// the spec's JSON) into spec.dump.
func (ck *ctrdCheckpoint) writeSpec(ctx context.Context, d ocispec.Descriptor, out string) error {
	data, err := ck.readSmall(ctx, d, "spec blob", 16<<20)
	if err != nil {
		return err
	}
	var a ptypes.Any
	var s specs.Spec
	if err := proto.Unmarshal(data, &a); err != nil {
		return fmt.Errorf("spec of %s: %w", ck.ref, err)
	}
	if err := json.Unmarshal(a.GetValue(), &s); err != nil || s.Process == nil {
		return fmt.Errorf("spec of %s is not an OCI runtime spec (%s, %v): %w", ck.ref, a.GetTypeUrl(), err, ErrUnknownSource)
	}
	return os.WriteFile(out, a.GetValue(), archive.FileMode)
}

// writeRW stores the rw layer uncompressed: the image compresses it anyway.
func (ck *ctrdCheckpoint) writeRW(ctx context.Context, d ocispec.Descriptor, out string) error {
	vr, c, err := ck.openVerified(ctx, d, false)
	if err != nil {
		return err
	}
	defer c.Close()
	dr, err := compression.DecompressStream(vr)
	if err != nil {
		return ck.verifyErr(d, vr, err)
	}
	defer dr.Close()
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, archive.FileMode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, dr); err != nil {
		f.Close()
		return ck.verifyErr(d, vr, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, vr)
	return ck.verifyErr(d, vr, err)
}

// ReadContainerdMeta reads config.dump of a containerd checkpoint unpacked
// in dir, and refuses a checkpoint of any other kind.
func ReadContainerdMeta(dir string) (ContainerdMeta, error) {
	var m ContainerdMeta
	data, err := os.ReadFile(filepath.Join(dir, configDumpName))
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	if err != nil || m.CryoKind != KindContainerd {
		return m, report.WithRemedy(fmt.Errorf("%s is not a containerd checkpoint (config.dump: %v, kind %q): %w", dir, err, m.CryoKind, ErrNotCheckpointImage), "restore it without --containerd")
	}
	return m, nil
}

func writeJSONFile(p string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(p, data, archive.FileMode)
}

// decodeIndex reads a checkpoint index blob.
func (ck *ctrdCheckpoint) decodeIndex(ctx context.Context, d ocispec.Descriptor) error {
	if !images.IsIndexType(d.MediaType) {
		return report.WithRemedy(fmt.Errorf("%s is a %s, not a checkpoint index: %w", ck.ref, d.MediaType, ErrUnknownSource), "give the image that `ctr task checkpoint` or `ctr container checkpoint --task` printed")
	}
	data, err := ck.readSmall(ctx, d, "index", 4<<20)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, &ck.index)
}
