package ociimage

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/manifest"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// fakeCheckpoint is a CRIU-looking directory: inventory.img and two pages
// files, one big enough to get a layer of its own, and cryo's manifest.
func fakeCheckpoint(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "ckpt")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("inventory"), 0o600)
	os.WriteFile(filepath.Join(dir, "pages-1.img"), bytes.Repeat([]byte{0}, 1<<20), 0o600)
	big := make([]byte, 2<<20)
	rand.Read(big[:1<<20])
	os.WriteFile(filepath.Join(dir, "pages-2.img"), big, 0o600)
	sealCheckpoint(t, dir)
	return dir
}

// sealCheckpoint writes the manifest of a CPU checkpoint with the digests
// of dir's files, as a checkpoint through cryo does: Build refuses a
// checkpoint without one.
func sealCheckpoint(t *testing.T, dir string) {
	t.Helper()
	m := manifest.New("process")
	var err error
	if m.Digests, err = filedigest.Files(dir); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(dir, m); err != nil {
		t.Fatal(err)
	}
}

// manifestBytes is the size of the manifest in dir, which an image carries
// with the CRIU images.
func manifestBytes(t *testing.T, dir string) int64 {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, manifest.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// A checkpoint without cryo's manifest (a plain CRIU dump, a Podman export
// without cryo-runc) is refused, and nothing is stored.
func TestBuildRefusesNoManifest(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	dir := fakeCheckpoint(t)
	os.Remove(filepath.Join(dir, manifest.ManifestName))
	src, err := OpenSource(dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, _, err = Build(ctx, st, src, BuildOptions{Ref: "example/plain:1"})
	var se *report.StepError
	if !errors.As(err, &se) || !errors.Is(err, manifest.ErrNoManifest) || !strings.Contains(err.Error(), "remedy: checkpoint through cryo") {
		t.Fatalf("build without a manifest: %v, want a report.StepError for ErrNoManifest with its remedy", err)
	}
	if list, err := st.ListImages(ctx); err != nil || len(list) != 0 {
		t.Fatalf("images after the refusal: %v, %v", list, err)
	}
}

func build(t *testing.T, enc *EncryptOptions) (*Store, string, string) {
	ctx := context.Background()
	st := newStore(t)
	dir := fakeCheckpoint(t)
	src, err := OpenSource(dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, sum, err := Build(ctx, st, src, BuildOptions{Ref: "example/ckpt:1", SplitAt: 2 << 20, Encrypt: enc})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Layers) != 2 || sum.Layers[1].Part != PartPages {
		t.Fatalf("layers %+v, want base + one pages layer", sum.Layers)
	}
	if sum.Sizes.HostMemory != 3<<20 || sum.Sizes.Ratio <= 1 {
		t.Fatalf("sizes %+v", sum.Sizes)
	}
	return st, dir, sum.Layers[1].Digest
}

func TestBuildUnpackRoundTrip(t *testing.T) {
	st, dir, _ := build(t, nil)
	out := filepath.Join(t.TempDir(), "out")
	im, err := st.Unpack(context.Background(), "example/ckpt:1", out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if im.Kind() != KindProcess {
		t.Fatalf("kind %q", im.Kind())
	}
	for _, f := range []string{"inventory.img", "pages-1.img", "pages-2.img"} {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, err := os.ReadFile(filepath.Join(CRIUDir(out), f))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s differs after the round trip (%v)", f, err)
		}
	}
	sum, err := st.InspectLocalWith(context.Background(), "example/ckpt:1", InspectOptions{})
	if err != nil || sum.Sizes.Total != 3<<20+9+manifestBytes(t, dir) || sum.Kind != KindProcess {
		t.Fatalf("inspect: %+v %v", sum, err)
	}
}

func TestUnpackRefusesTamperedLayer(t *testing.T) {
	st, _, layer := build(t, nil)
	path := filepath.Join(st.Root, "blobs/sha256", layer[len("sha256:"):])
	data, _ := os.ReadFile(path)
	data[len(data)-10] ^= 1
	os.WriteFile(path, data, 0o600)
	out := filepath.Join(t.TempDir(), "out")
	_, err := st.Unpack(context.Background(), "example/ckpt:1", out, nil)
	if !errors.Is(err, ErrIntegrity) {
		t.Fatalf("got %v, want ErrIntegrity", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("refused unpack left its directory")
	}
}

func TestEncryptedNeedsKey(t *testing.T) {
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := rsa.GenerateKey(rand.Reader, 2048)
	pubDER, _ := x509.MarshalPKIXPublicKey(&k1.PublicKey)
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	priv := func(k *rsa.PrivateKey) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	}
	st, _, _ := build(t, &EncryptOptions{PublicKeys: [][]byte{pub}})
	ctx := context.Background()
	for name, dec := range map[string]*DecryptOptions{"no key": nil, "wrong key": {PrivateKeys: [][]byte{priv(k2)}}} {
		_, err := st.Unpack(ctx, "example/ckpt:1", filepath.Join(t.TempDir(), "o"), dec)
		if !errors.Is(err, ErrDecrypt) {
			t.Errorf("%s: got %v, want ErrDecrypt", name, err)
		}
	}
	if _, err := st.Unpack(ctx, "example/ckpt:1", filepath.Join(t.TempDir(), "o"), &DecryptOptions{PrivateKeys: [][]byte{priv(k1)}}); err != nil {
		t.Fatal(err)
	}
}

func TestNotCheckpointSource(t *testing.T) {
	if _, err := OpenSource(t.TempDir(), t.TempDir()); !errors.Is(err, ErrUnknownSource) {
		t.Fatalf("got %v, want ErrUnknownSource", err)
	}
}
