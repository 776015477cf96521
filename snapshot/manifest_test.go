package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/cudacr"
)

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	m := New("ctr1")
	m.Processes = []Process{{PID: 42, State: "running"}}
	m.AddStep("suspend", 1500*time.Millisecond, nil)
	if err := Write(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.ContainerID != "ctr1" || !got.HasCUDA() || got.Steps[0].Duration() != 1500*time.Millisecond {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(filepath.Join(dir, "nope")); !errors.Is(err, ErrNotCheckpoint) {
		t.Fatalf("missing dir: %v", err)
	}
	if _, err := Read(dir); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("no manifest: %v", err)
	}
	os.WriteFile(filepath.Join(dir, ManifestName), []byte("{"), 0o644)
	if _, err := Read(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad json: %v", err)
	}
	os.WriteFile(filepath.Join(dir, ManifestName), []byte(`{"version":99}`), 0o644)
	if _, err := Read(dir); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("future version: %v", err)
	}
}

func TestDigests(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) { os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644) }
	write("pages-1.img", "pages")
	write("inventory.img", "inv")
	write("criu-dump.log", "log")
	m := New("c")
	d, err := ComputeDigests(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 2 {
		t.Fatalf("digests cover %v, want the two images only", d)
	}
	if err := VerifyDigests(dir, m); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("no digests must be corrupt: %v", err)
	}
	m.Digests = d
	write("criu-restore.log", "written by a restore")
	if err := VerifyDigests(dir, m); err != nil {
		t.Fatal(err)
	}
	write("pages-1.img", "pagez")
	err = VerifyDigests(dir, m)
	var cf *CorruptFileError
	if !errors.As(err, &cf) || cf.File != "pages-1.img" || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped byte: %v", err)
	}
	want := "checkpoint image file pages-1.img is corrupt: sha256 mismatch"
	if got := err.Error(); len(got) < len(want) || got[:len(want)] != want {
		t.Fatalf("message %q", got)
	}
	write("pages-1.img", "pages")
	write("pages-2.img", "extra")
	if err := VerifyDigests(dir, m); !errors.As(err, &cf) || cf.File != "pages-2.img" {
		t.Fatalf("uncovered image: %v", err)
	}
	os.Remove(filepath.Join(dir, "pages-2.img"))
	os.Remove(filepath.Join(dir, "inventory.img"))
	if err := VerifyDigests(dir, m); !errors.As(err, &cf) || cf.Reason != "missing" {
		t.Fatalf("missing image: %v", err)
	}
}

func TestImageDir(t *testing.T) {
	dir := t.TempDir()
	if ok, err := IsImageDir(dir); ok || err != nil {
		t.Fatalf("empty dir: %v %v", ok, err)
	}
	os.WriteFile(filepath.Join(dir, "inventory.img"), nil, 0o644)
	if ok, _ := IsImageDir(dir); !ok {
		t.Fatal("inventory.img not seen")
	}
	os.WriteFile(filepath.Join(dir, "files.img"), []byte("\x00/usr/lib/libcuda.so.1\x00"), 0o644)
	if ok, _ := ReferencesCUDA(dir); !ok {
		t.Fatal("libcuda not seen")
	}
}

var _ = cudacr.GPU{}
