package ociimage

import (
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// exportTar writes the tiny checkpoint as a gzip export tar.
func exportTar(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	tinyCheckpoint(t, root, "checkpoint")
	return exportTarOf(t, root)
}

// exportTarOf writes the export layout in root as a gzip tar.
func exportTarOf(t *testing.T, root string) string {
	t.Helper()
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "export.tar.gz")
	f, err := os.Create(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if err := archive.Write(zw, files); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	f.Close()
	return tarPath
}

// Asked for, the command lines of an export tar are read from the few
// pages that hold them, streamed a second time, as a directory's are.
func TestInspectTarCommandLines(t *testing.T) {
	sum, err := InspectPathWith(exportTar(t), InspectOptions{CommandLines: true})
	if err != nil {
		t.Fatal(err)
	}
	checkTinyDetails(t, sum, true)
	if got := sum.Details.Processes[0].CommandLine(); got != `./tiny --listen 47311 "two words"` {
		t.Errorf("command line %q", got)
	}
	if len(sum.Details.Processes[0].Env) == 0 {
		t.Error("environment not read")
	}
}

// The same for an image of the store: its pages layer is streamed.
func TestInspectLocalCommandLines(t *testing.T) {
	st, _ := buildTiny(t)
	sum, err := st.InspectLocalWith(context.Background(), "example/tiny:1", InspectOptions{CommandLines: true})
	if err != nil {
		t.Fatal(err)
	}
	checkTinyDetails(t, sum, true)
}
