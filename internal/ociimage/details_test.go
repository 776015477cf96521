package ociimage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/manifest"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// criuTestdata is criuinfo's real CRIU images of a small process tree.
const criuTestdata = "../criuimg/testdata/tiny"

// tinyCheckpoint copies the real CRIU images into dir/name and gives them
// a cryo manifest, as `cryo checkpoint --dir` leaves them.
func tinyCheckpoint(t *testing.T, dir, name string) string {
	t.Helper()
	ckpt := filepath.Join(dir, name)
	if err := os.MkdirAll(ckpt, 0o700); err != nil {
		t.Fatal(err)
	}
	testsupport.CopyFiles(t, criuTestdata, ckpt)
	m := manifest.New("tiny")
	var err error
	m.CRIUVersion = "4.2.1"
	if m.Digests, err = filedigest.Files(ckpt); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(ckpt, m); err != nil {
		t.Fatal(err)
	}
	return ckpt
}

func checkTinyDetails(t *testing.T, sum *Summary, cmdline bool) {
	t.Helper()
	d := sum.Details
	if d == nil {
		t.Fatalf("no details: %s", sum.DetailsNote)
	}
	if len(d.Processes) != 2 || d.Processes[0].Comm != "tiny" || d.Processes[1].PPID != d.Processes[0].PID {
		t.Fatalf("processes = %+v", d.Processes)
	}
	if got := d.Processes[0].Cmdline != nil; got != cmdline {
		t.Errorf("command line read: %v, want %v (%q)", got, cmdline, d.Processes[0].Cmdline)
	}
	if len(d.Processes[0].Sockets) != 2 || d.DumpStats == nil || len(d.Mounts) == 0 {
		t.Errorf("sockets %+v, dump stats %+v, %d mounts", d.Processes[0].Sockets, d.DumpStats, len(d.Mounts))
	}
}

func TestInspectPathDetails(t *testing.T) {
	dir := tinyCheckpoint(t, t.TempDir(), "ckpt")
	sum, err := InspectPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkTinyDetails(t, sum, true)
	if v := sum.Versions; v.Cryo == "" || v.CRIU != "4.2.1" || v.Kernel == "" {
		t.Errorf("versions = %+v", v)
	}
}

// An export tar is read for its metadata: pages are placeholders, so the
// command lines are not read; CRIU's statistics sit at its root.
func TestInspectExportTarDetails(t *testing.T) {
	root := t.TempDir()
	ckpt := tinyCheckpoint(t, root, "checkpoint")
	if err := os.Rename(filepath.Join(ckpt, "stats-dump"), filepath.Join(root, "stats-dump")); err != nil {
		t.Fatal(err)
	}
	sum, err := InspectPath(exportTarOf(t, root))
	if err != nil {
		t.Fatal(err)
	}
	checkTinyDetails(t, sum, false)
}

func buildTiny(t *testing.T) (*Store, *Summary) {
	t.Helper()
	ctx := context.Background()
	st := newStore(t)
	src, err := OpenSource(tinyCheckpoint(t, t.TempDir(), "ckpt"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	// pages-1.img (20 KiB) gets a layer of its own, which inspect skips.
	_, sum, err := Build(ctx, st, src, BuildOptions{Ref: "example/tiny:1", SplitAt: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Layers) != 2 || sum.Layers[1].Part != PartPages {
		t.Fatalf("layers %+v, want base + pages", sum.Layers)
	}
	return st, sum
}

func TestInspectLocalDetails(t *testing.T) {
	st, built := buildTiny(t)
	sum, err := st.InspectLocalWith(context.Background(), "example/tiny:1", InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkTinyDetails(t, sum, false)
	if !strings.HasPrefix(sum.Digest, "sha256:") || sum.Versions != built.Versions || sum.Versions.CRIU != "4.2.1" {
		t.Errorf("digest %q, versions %+v (built %+v)", sum.Digest, sum.Versions, built.Versions)
	}
}

// The versions reach the annotations, which is all a registry's manifest
// gives InspectRemote.
func TestVersionsAnnotated(t *testing.T) {
	_, built := buildTiny(t)
	a := built.annotations()
	got := FromManifest(ocispec.Manifest{Annotations: a})
	if got.Versions != built.Versions || a[AnnCRIUVersion] != "4.2.1" {
		t.Errorf("annotations %v read back as %+v, want %+v", a, got.Versions, built.Versions)
	}
}

func TestVerifyPath(t *testing.T) {
	dir := tinyCheckpoint(t, t.TempDir(), "ckpt")
	if err := VerifyPath(dir, t.TempDir()); err != nil {
		t.Fatalf("intact checkpoint: %v", err)
	}
	path := filepath.Join(dir, "core-21091.img")
	data, _ := os.ReadFile(path)
	data[len(data)/2] ^= 1
	os.WriteFile(path, data, 0o600)
	err := VerifyPath(dir, t.TempDir())
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.File != "core-21091.img" || !errors.Is(err, manifest.ErrCorrupt) {
		t.Fatalf("damaged core image: %v, want a VerifyError naming core-21091.img", err)
	}
	os.Remove(filepath.Join(dir, manifest.ManifestName))
	if err := VerifyPath(dir, t.TempDir()); !errors.Is(err, manifest.ErrNoManifest) {
		t.Fatalf("no manifest: %v, want ErrNoManifest", err)
	}
}

func TestVerifyLocal(t *testing.T) {
	st, sum := buildTiny(t)
	ctx := context.Background()
	if err := st.VerifyLocal(ctx, "example/tiny:1", t.TempDir(), nil); err != nil {
		t.Fatalf("intact image: %v", err)
	}
	layer := sum.Layers[1].Digest
	path := filepath.Join(st.Root, "blobs/sha256", strings.TrimPrefix(layer, "sha256:"))
	data, _ := os.ReadFile(path)
	data[len(data)-10] ^= 1
	os.WriteFile(path, data, 0o600)
	err := st.VerifyLocal(ctx, "example/tiny:1", t.TempDir(), nil)
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.File != layer || !errors.Is(err, ErrIntegrity) {
		t.Fatalf("damaged layer: %v, want a VerifyError naming %s", err, layer)
	}
}

// A tar is extracted in full to be hashed.
func TestVerifyExportTar(t *testing.T) {
	root := t.TempDir()
	tinyCheckpoint(t, root, "checkpoint")
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := archive.Write(&buf, files); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "export.tar")
	if err := os.WriteFile(tarPath, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := VerifyPath(tarPath, t.TempDir()); err != nil {
		t.Fatalf("intact export: %v", err)
	}
	data := buf.Bytes()
	i := bytes.Index(data, []byte("--listen"))
	data[i] ^= 1 // in pages-1.img
	if err := os.WriteFile(tarPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var ve *VerifyError
	if err := VerifyPath(tarPath, t.TempDir()); !errors.As(err, &ve) || ve.File != "pages-1.img" {
		t.Fatalf("damaged pages in the export: %v, want a VerifyError naming pages-1.img", err)
	}
}
