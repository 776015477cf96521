package ociimage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// TestOpenArchiveBounded: a restore's archive is extracted within the
// unpack bounds (here 50 entries, against one of 200 empty files, which
// byte budgets would count as nothing), and what was extracted goes.
func TestOpenArchiveBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "many.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	tw.WriteHeader(&tar.Header{Name: "checkpoint/", Typeflag: tar.TypeDir, Mode: 0o700})
	for i := range 200 {
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("checkpoint/e%d", i), Typeflag: tar.TypeReg, Mode: 0o600})
	}
	tw.Close()
	f.Close()
	tmp := t.TempDir()
	_, err = OpenArchive(context.Background(), path, tmp, archive.Limits{MaxEntries: 50})
	var le *archive.LimitError
	if !errors.As(err, &le) || !errors.Is(err, archive.ErrLimit) {
		t.Fatalf("OpenArchive of 200 entries within 50: %v, want a LimitError", err)
	}
	if e, _ := os.ReadDir(tmp); len(e) != 0 {
		t.Fatalf("the refused extraction left %d entries in %s", len(e), tmp)
	}
}

// TestOpenArchiveExport: the tar that `cryo image export` writes of a
// bare checkpoint opens as a process checkpoint with its manifest.
func TestOpenArchiveExport(t *testing.T) {
	dir := fakeCheckpoint(t)
	src, err := OpenSource(dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "x.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ExportSource(src, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := OpenArchive(context.Background(), path, t.TempDir(), archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Kind != KindProcess || got.Manifest == nil {
		t.Fatalf("kind %q, manifest %v", got.Kind, got.Manifest != nil)
	}
	if _, err := os.Stat(filepath.Join(got.CRIU, "pages-2.img")); err != nil {
		t.Fatal(err)
	}
}
