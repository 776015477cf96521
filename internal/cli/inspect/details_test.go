package inspect

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// The details of a checkpoint directory, as `cryo inspect` prints them:
// the versions that took it, then its process tree.
func TestWriteDetailsOfPath(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := os.MkdirAll(ckpt, 0o700); err != nil {
		t.Fatal(err)
	}
	testsupport.CopyFiles(t, tinyDir, ckpt)
	m := manifest.New("tiny")
	m.CRIUVersion = "4.2.1"
	var err error
	if m.Digests, err = digest.Files(ckpt); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(ckpt, m); err != nil {
		t.Fatal(err)
	}
	sum, err := ociimage.InspectPath(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteDetails(&b, sum); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Versions:  cryo " + sum.Versions.Cryo + ", CRIU 4.2.1, kernel ", "GPU driver -", "21088  ./tiny --listen 47311 \"two words\""} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteDetails lacks %q:\n%s", want, b.String())
		}
	}
}

func TestWriteDetailsNote(t *testing.T) {
	sum := &ociimage.Summary{DetailsNote: "read from the registry\x1b[2J", Versions: ociimage.Versions{Cryo: "v1"}}
	var b bytes.Buffer
	if err := WriteDetails(&b, sum); err != nil {
		t.Fatal(err)
	}
	want := []string{"Versions:  cryo v1, CRIU -, kernel -, GPU driver -", `Details:   read from the registry\x1b[2J`}
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); !slices.Equal(lines, want) {
		t.Errorf("WriteDetails = %q, want %q", lines, want)
	}
}
