package ociimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Opening the store removes the temporary encrypted blobs of dead writers
// and old unnamed ones, and keeps those of live writers.
func TestOpenStoreSweepsEncTemps(t *testing.T) {
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs", "sha256")
	os.MkdirAll(blobs, 0o700)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{ // name: kept
		fmt.Sprintf(".enc-%d-1", dead.Process.Pid): false,
		fmt.Sprintf(".enc-%d-2", os.Getpid()):      true,
		".enc-3":                                   true,
		".enc-4":                                   false,
		"notatemp":                                 true,
	}
	for name := range files {
		os.WriteFile(filepath.Join(blobs, name), []byte("x"), 0o600)
	}
	old := time.Now().Add(-2 * legacyEncTempAge)
	os.Chtimes(filepath.Join(blobs, ".enc-4"), old, old)
	if _, err := OpenStore(context.Background(), root); err != nil {
		t.Fatal(err)
	}
	for name, kept := range files {
		if _, err := os.Stat(filepath.Join(blobs, name)); (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v", name, err == nil, kept)
		}
	}
}

// The temporary blob names its writer.
func TestCreateEncTempNamesPID(t *testing.T) {
	f, err := createEncTemp(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if want := fmt.Sprintf(".enc-%d-", os.Getpid()); filepath.Base(f.Name())[:len(want)] != want {
		t.Fatalf("name %s, want prefix %s", f.Name(), want)
	}
}
