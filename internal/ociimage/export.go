package ociimage

import (
	"archive/tar"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Export writes the checkpoint ref of the store to w as an uncompressed
// checkpoint archive in Podman's export layout: checkpoint/ (the CRIU
// images with cryo's manifest), config.dump, spec.dump, stats-dump and,
// for containers, rootfs-diff.tar. That is the layout that
// `checkpointctl inspect|show` and `podman container restore --import`
// read (Podman restores only its own kind). A checkpoint that lacks a
// file they need gets one written from the image's annotations: a bare
// process's config.dump and spec.dump (see exporter.finish).
//
// The layers stream from the store through the same digest, diff_id and
// decryption checks as an unpack, with nothing written to disk; a layer
// that fails them fails the export, and the caller should remove what it
// wrote to w. cryo's manifest is not checked against the CRIU files here:
// a restore from the archive does that (`cryo image build` of it, or the
// CRIU action script).
func (st *Store) Export(ctx context.Context, ref string, w io.Writer, dec *DecryptOptions) error {
	im, err := st.LoadImage(ctx, ref)
	if err != nil {
		return err
	}
	e := newExporter(w, metaFromManifest(im))
	walk := st.walkLayers
	if IsRunnable(im.Manifest.Annotations) {
		walk = st.walkRunnable
	}
	if err := walk(ctx, im, dec, e); err != nil {
		return &report.StepError{Op: "export", ID: ref, Err: err, Remedy: exportRemedy(err)}
	}
	if err := e.finish(); err != nil {
		return &report.StepError{Op: "export", ID: ref, Err: err, Remedy: "check the free space where the archive is written"}
	}
	return nil
}

// walkLayers feeds every layer of a checkpoint image to the exporter.
func (st *Store) walkLayers(ctx context.Context, im *Image, dec *DecryptOptions, e *exporter) error {
	for i, l := range im.Manifest.Layers {
		if err := st.walkLayer(ctx, l, im.Config.RootFS.DiffIDs[i], dec, e.add); err != nil {
			return err
		}
	}
	return nil
}

func exportRemedy(err error) string {
	if r := remedyFor(err); r != "" && !strings.HasPrefix(r, "free space") {
		return r
	}
	return "check the free space where the archive is written, then retry"
}

// ExportSource writes a checkpoint directory or export tar, opened with
// OpenSource, to w in the same layout as Export: a `cryo checkpoint --dir`
// directory becomes an archive that checkpointctl reads without an image
// being built first.
func ExportSource(src *Source, w io.Writer) error {
	sum, err := Summarize(src)
	if err != nil {
		return err
	}
	e := newExporter(w, metaFromSource(src, sum))
	for _, f := range src.Files {
		if err := exportFile(e, f); err != nil {
			return fmt.Errorf("export %s: %w", src.Root, err)
		}
	}
	return e.finish()
}

func exportFile(e *exporter, f archive.Entry) error {
	in, err := os.Open(f.Path)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	return e.add(&tar.Header{Typeflag: tar.TypeReg, Name: f.Name, Size: st.Size()}, io.LimitReader(in, st.Size()))
}

// exportMeta is what the image or source says about the checkpoint, for
// the config.dump and spec.dump that an export writes where the
// checkpoint's own are missing or incomplete.
type exportMeta struct {
	kind         Kind
	name         string
	baseImage    string
	runtime      string
	checkpointed time.Time
}

func metaFromManifest(im *Image) exportMeta {
	a := im.Manifest.Annotations
	sum := FromManifest(im.Manifest)
	m := exportMeta{kind: im.Kind(), name: sum.Name, baseImage: sum.BaseImage,
		runtime: cmp.Or(a[AnnPodmanRuntime], a[AnnContainerdRuntime]), checkpointed: sum.Created}
	if m.checkpointed.IsZero() && im.Config.Created != nil {
		m.checkpointed = *im.Config.Created
	}
	return m
}

func metaFromSource(src *Source, sum *Summary) exportMeta {
	return exportMeta{kind: src.Kind, name: src.Name, baseImage: src.BaseImage, runtime: src.Runtime, checkpointed: sum.Created}
}

// maxHeld bounds the metadata files an export holds in memory to rewrite.
const maxHeld = 16 << 20

// heldName: the files an export rewrites or copies at its end, rather than
// passing them through.
func heldName(name string) bool {
	switch name {
	case configDumpName, SpecDumpName, statsDumpName, checkpointDir + "/" + statsDumpName:
		return true
	}
	return false
}

// exporter writes the archive: every file passes through but those it
// holds (heldName) to complete at finish.
type exporter struct {
	tw   *tar.Writer
	meta exportMeta
	held map[string][]byte
	seen map[string]bool
}

func newExporter(w io.Writer, m exportMeta) *exporter {
	return &exporter{tw: tar.NewWriter(w), meta: m, held: map[string][]byte{}, seen: map[string]bool{}}
}

// add takes one entry of a layer or source. Directories are written as
// their files need them; anything but a file or directory is refused, as
// the extractor refuses it.
func (e *exporter) add(hdr *tar.Header, r io.Reader) error {
	name := strings.TrimPrefix(path.Clean(hdr.Name), "./")
	if strings.HasPrefix(hdr.Name, "/") || name == ".." || strings.HasPrefix(name, "../") {
		return &archive.UnsafeEntryError{Name: hdr.Name, Reason: "outside the checkpoint"}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return nil
	case tar.TypeReg:
	default:
		return &archive.UnsafeEntryError{Name: hdr.Name, Reason: "not a regular file or directory"}
	}
	if e.seen[name] {
		return fmt.Errorf("%s appears twice in the checkpoint's layers: %w", name, ErrIntegrity)
	}
	e.seen[name] = true
	if heldName(name) {
		data, err := io.ReadAll(io.LimitReader(r, maxHeld+1))
		if err != nil {
			return err
		}
		if len(data) > maxHeld {
			return fmt.Errorf("%s is over %d bytes: %w", name, maxHeld, ErrIntegrity)
		}
		e.held[name] = data
		if path.Dir(name) == "." {
			return nil
		}
		r = strings.NewReader(string(data))
	}
	return e.writeFile(name, hdr.Size, r)
}

var exportEpoch = time.Unix(0, 0).UTC()

func (e *exporter) writeFile(name string, size int64, r io.Reader) error {
	if err := e.writeDirs(path.Dir(name)); err != nil {
		return err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: archive.FileMode, ModTime: exportEpoch, Format: tar.FormatPAX}
	if err := e.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	n, err := io.Copy(e.tw, r)
	if err == nil && n != size {
		err = fmt.Errorf("%d of %d bytes", n, size)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

func (e *exporter) writeDirs(dir string) error {
	if dir == "." || e.seen[dir+"/"] {
		return nil
	}
	if err := e.writeDirs(path.Dir(dir)); err != nil {
		return err
	}
	e.seen[dir+"/"] = true
	hdr := &tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: archive.DirMode, ModTime: exportEpoch, Format: tar.FormatPAX}
	return e.tw.WriteHeader(hdr)
}

// finish writes config.dump and spec.dump, completed (see completeConfig
// and completeSpec), and stats-dump at the top, where Podman's export has
// it and `checkpointctl inspect --stats` reads it; cryo keeps it in
// checkpoint/, where CRIU wrote it.
func (e *exporter) finish() error {
	// checkpointctl reads only an archive with a checkpoint/ directory entry.
	if err := e.writeDirs(checkpointDir); err != nil {
		return err
	}
	config, err := completeConfig(e.held[configDumpName], e.meta)
	if err != nil {
		return err
	}
	spec, err := completeSpec(e.held[SpecDumpName], e.meta)
	if err != nil {
		return err
	}
	stats := e.held[statsDumpName]
	if stats == nil {
		stats = e.held[checkpointDir+"/"+statsDumpName]
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{configDumpName, config}, {SpecDumpName, spec}, {statsDumpName, stats}} {
		if f.data == nil {
			continue
		}
		if err := e.writeFile(f.name, int64(len(f.data)), strings.NewReader(string(f.data))); err != nil {
			return err
		}
	}
	return e.tw.Close()
}

// layerEntry is one entry of a layer's tar stream.
type layerEntry = func(*tar.Header, io.Reader) error

// walkLayer streams layer l through the checks of an unpack (digest,
// decryption, diff_id) and hands each tar entry to fn.
func (st *Store) walkLayer(ctx context.Context, l ocispec.Descriptor, diffID digest.Digest, dec *DecryptOptions, fn layerEntry) error {
	tarStream, verify, closeFn, err := st.openLayer(l, dec, nil)
	if err != nil {
		return err
	}
	defer closeFn()
	plain := newDigestCounter()
	tr := tar.NewReader(io.TeeReader(tarStream, plain))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return layerErr(l, err)
		}
		rec := &readErrRecorder{r: tr}
		if err := fn(hdr, rec); err != nil {
			if rec.err != nil {
				return layerErr(l, rec.err)
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return finishLayer(l, diffID, tarStream, plain, verify)
}

// readErrRecorder tells a layer that fails to read (corrupt, truncated)
// from an archive that fails to write.
type readErrRecorder struct {
	r   io.Reader
	err error
}

func (r *readErrRecorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}
