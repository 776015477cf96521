package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// tarEntries reads an export back: each file's bytes, and "name/" for
// each directory entry.
func tarEntries(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if _, dup := out[hdr.Name]; dup {
			t.Fatalf("%s written twice", hdr.Name)
		}
		out[hdr.Name] = b
	}
}

// readDumps extracts an export and reads its config.dump and spec.dump
// with checkpointctl's own readers.
func readDumps(t *testing.T, data []byte) (*metadata.ContainerConfig, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	if err := archive.Extract(bytes.NewReader(data), dir); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := metadata.ReadContainerCheckpointConfigDump(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := metadata.ReadContainerCheckpointSpecDump(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, spec.Annotations
}

// A bare process's image exports with the checkpoint/ directory entry
// checkpointctl looks for, a config.dump and a spec.dump that name it and
// carry its time, and CRIU's stats-dump at the top as well.
func TestExportProcessImage(t *testing.T) {
	dir := fakeCheckpoint(t)
	os.WriteFile(filepath.Join(dir, statsDumpName), []byte("stats"), 0o600)
	st := buildDir(t, dir)
	var buf bytes.Buffer
	if err := st.Export(context.Background(), "example/ckpt:1", &buf, nil); err != nil {
		t.Fatal(err)
	}
	files := tarEntries(t, buf.Bytes())
	for _, f := range []string{"checkpoint/", "checkpoint/inventory.img", "checkpoint/pages-1.img", "checkpoint/pages-2.img", "config.dump", "spec.dump", "stats-dump", "checkpoint/stats-dump"} {
		if _, ok := files[f]; !ok {
			t.Fatalf("export lacks %s (has %d entries)", f, len(files))
		}
	}
	want, _ := os.ReadFile(filepath.Join(dir, "pages-2.img"))
	if !bytes.Equal(files["checkpoint/pages-2.img"], want) {
		t.Fatal("pages-2.img differs in the export")
	}
	cfg, ann := readDumps(t, buf.Bytes())
	created := cfg.CreatedTime
	if cfg.Name != "process" || cfg.ID != "process" || created.IsZero() || time.Since(created) > time.Hour || cfg.CheckpointedAt.IsZero() {
		t.Fatalf("config.dump %+v: want the name and today's time", cfg)
	}
	if ann[annCRIContainerName] != "process" || ann[AnnKind] != string(KindProcess) {
		t.Fatalf("spec.dump annotations %v", ann)
	}
}

func buildDir(t *testing.T, dir string) *Store {
	t.Helper()
	ctx := context.Background()
	st := newStore(t)
	src, err := OpenSource(dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, _, err := Build(ctx, st, src, BuildOptions{Ref: "example/ckpt:1", SplitAt: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	return st
}

// A directory taken by `cryo checkpoint --dir` exports without an image.
func TestExportSourceProcessDir(t *testing.T) {
	src, err := OpenSource(fakeCheckpoint(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var buf bytes.Buffer
	if err := ExportSource(src, &buf); err != nil {
		t.Fatal(err)
	}
	if files := tarEntries(t, buf.Bytes()); len(files["checkpoint/pages-2.img"]) != 2<<20 || files["checkpoint/"] == nil {
		t.Fatalf("export of the directory: %d entries", len(files))
	}
	if cfg, _ := readDumps(t, buf.Bytes()); cfg.CreatedTime.IsZero() {
		t.Fatalf("config.dump %+v has no time", cfg)
	}
}

// Podman's own config.dump and spec.dump pass through byte for byte:
// Podman restores from them.
func TestExportKeepsPodmanDumps(t *testing.T) {
	root := exportDir(t, "runc", false)
	config := []byte(`{"id":"c1","name":"app","runtime":"runc","createdTime":"2026-11-20T10:00:00Z","rawImageName":"alpine","unknownField":{"x":1}}`)
	spec := []byte(`{"ociVersion":"1.0.0","annotations":{"io.container.manager":"libpod"}}`)
	os.WriteFile(filepath.Join(root, configDumpName), config, 0o600)
	os.WriteFile(filepath.Join(root, SpecDumpName), spec, 0o600)
	src, err := OpenSource(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ExportSource(src, &buf); err != nil {
		t.Fatal(err)
	}
	files := tarEntries(t, buf.Bytes())
	if !bytes.Equal(files[configDumpName], config) || !bytes.Equal(files[SpecDumpName], spec) {
		t.Fatalf("Podman's dumps changed:\n%s\n%s", files[configDumpName], files[SpecDumpName])
	}
}

// The config.dump of a containerd checkpoint that an older cryo wrote has
// no times and its spec no name that checkpointctl reads; an export fills
// both in, keeping the fields a restore reads.
func TestExportCompletesContainerdDumps(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 30, 0, 0, time.UTC)
	m := exportMeta{kind: KindContainerd, name: "app", checkpointed: at}
	raw := []byte(`{"id":"app","name":"app","rootfsImageName":"docker.io/library/busybox:latest","runtime":"io.containerd.cryo.v2","cryoKind":"containerd","namespace":"ns"}`)
	out, err := completeConfig(raw, m)
	if err != nil {
		t.Fatal(err)
	}
	var meta ContainerdMeta
	if err := json.Unmarshal(out, &meta); err != nil {
		t.Fatal(err)
	}
	if !meta.CreatedTime.Equal(at) || !meta.CheckpointedAt.Equal(at) || meta.Namespace != "ns" || meta.RootfsImageName != "docker.io/library/busybox:latest" || meta.CryoKind != KindContainerd {
		t.Fatalf("completed config.dump %s", out)
	}
	spec, err := completeSpec([]byte(`{"ociVersion":"1.2.0","process":{"args":["sh"]},"annotations":{"a":"b"}}`), m)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Process     struct{ Args []string }
		Annotations map[string]string
	}
	if err := json.Unmarshal(spec, &s); err != nil || s.Annotations[annCRIContainerName] != "app" || s.Annotations["a"] != "b" || len(s.Process.Args) != 1 {
		t.Fatalf("completed spec.dump %s (%v)", spec, err)
	}
}

// An export whose layer was tampered with fails as an unpack would.
func TestExportRefusesTamperedLayer(t *testing.T) {
	st, _, layer := build(t, nil)
	p := filepath.Join(st.Root, "blobs/sha256", layer[len("sha256:"):])
	data, _ := os.ReadFile(p)
	data[len(data)-10] ^= 1
	os.WriteFile(p, data, 0o600)
	if err := st.Export(context.Background(), "example/ckpt:1", io.Discard, nil); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("got %v, want ErrIntegrity", err)
	}
}
