package imagerestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	godigest "github.com/opencontainers/go-digest"

	"github.com/cryo-gpu/cryo/internal/manifest"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

const testRef = "registry.example/ckpt/proc:1"

// storeWithImage builds a bare process tree's checkpoint image, tagged
// testRef, in a new store, and returns the store's root and its digest.
func storeWithImage(t *testing.T) (string, godigest.Digest) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ckpt")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("inventory"), 0o600)
	os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("pages"), 0o600)
	m := manifest.New("process")
	var err error
	if m.Digests, err = filedigest.Files(dir); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(dir, m); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "store")
	st, err := ociimage.OpenStore(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	src, err := ociimage.OpenSource(dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	d, _, err := ociimage.Build(ctx, st, src, ociimage.BuildOptions{Ref: testRef})
	if err != nil {
		t.Fatal(err)
	}
	return root, d.Digest
}

func failedStep(t *testing.T, err error) Step {
	t.Helper()
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("error %v (%T): want a *Failure", err, err)
	}
	return f.Step
}

// The local path: the image is loaded, checked by the caller's hook and
// unpacked verified into a new work directory, which Remove deletes.
func TestFetchUnpackLocal(t *testing.T) {
	ctx := context.Background()
	root, d := storeWithImage(t)
	checked := 0
	f, err := Fetch(ctx, FetchOptions{Ref: testRef, Store: root, Check: func(_ context.Context, im *ociimage.Image) error {
		checked++
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if checked != 1 || f.Pulled || f.Image.Kind() != ociimage.KindProcess {
		t.Fatalf("checked %d times, pulled %v, kind %q", checked, f.Pulled, f.Image.Kind())
	}
	base := t.TempDir()
	p, err := f.Unpack(ctx, UnpackOptions{Base: base})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p.Dir) != base || p.Digest != d.String() || p.Ref != testRef {
		t.Fatalf("prepared %+v, want a work directory under %s of %s", p, base, d)
	}
	if _, err := os.Stat(filepath.Join(p.CRIUDir(), "inventory.img")); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Dir); !os.IsNotExist(err) {
		t.Fatalf("work directory after Remove: %v", err)
	}
}

// A caller's directory is unpacked into and kept.
func TestUnpackKeepsCallersDir(t *testing.T) {
	ctx := context.Background()
	root, _ := storeWithImage(t)
	f, err := Fetch(ctx, FetchOptions{Ref: testRef, Store: root})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "mine")
	p, err := f.Unpack(ctx, UnpackOptions{Dir: dir, Base: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if p.Dir != dir {
		t.Fatalf("work directory %s, want %s", p.Dir, dir)
	}
	if err := p.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ociimage.CRIUDir(dir), "inventory.img")); err != nil {
		t.Fatalf("the caller's directory after Remove: %v", err)
	}
}

// A caller's directory that is not empty is refused and left as it was.
func TestUnpackLeavesCallersNonEmptyDir(t *testing.T) {
	ctx := context.Background()
	root, _ := storeWithImage(t)
	f, err := Fetch(ctx, FetchOptions{Ref: testRef, Store: root})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mine := filepath.Join(dir, "notes")
	os.WriteFile(mine, []byte("mine"), 0o600)
	if _, err := f.Unpack(ctx, UnpackOptions{Dir: dir, Base: t.TempDir()}); failedStep(t, err) != StepUnpack {
		t.Fatalf("unpack into a full directory: %v", err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Fatalf("the caller's file after the refusal: %v", err)
	}
}

// The caller's early check refuses before anything is unpacked, with its
// own error unchanged.
func TestFetchCheckRefusesBeforeUnpack(t *testing.T) {
	root, _ := storeWithImage(t)
	refused := errors.New("name taken")
	_, err := Fetch(context.Background(), FetchOptions{Ref: testRef, Store: root,
		Check: func(context.Context, *ociimage.Image) error { return refused }})
	if failedStep(t, err) != StepCheck || !errors.Is(err, refused) || err.Error() != refused.Error() {
		t.Fatalf("error %v: want the check's, at StepCheck", err)
	}
}

// A container's restore refuses a bare process tree by its kind, and a pin
// refuses another digest, before anything is unpacked.
func TestFetchRefusesKindAndPin(t *testing.T) {
	ctx := context.Background()
	root, d := storeWithImage(t)
	_, err := Fetch(ctx, FetchOptions{Ref: testRef, Store: root, Container: true})
	if failedStep(t, err) != StepKind || !errors.Is(err, ErrNotContainerCheckpoint) {
		t.Fatalf("bare tree for a container: %v", err)
	}
	other := godigest.FromString("another image")
	_, err = Fetch(ctx, FetchOptions{Ref: testRef, Store: root, Pin: other})
	if failedStep(t, err) != StepRead || !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("pinned to %s, stored %s: %v", other, d, err)
	}
}

// A store missing the image fails the read; the caller's Open is used.
func TestFetchLocalMissingAndOpen(t *testing.T) {
	ctx := context.Background()
	root, _ := storeWithImage(t)
	_, err := Fetch(ctx, FetchOptions{Ref: "registry.example/ckpt/none:1", Store: root})
	if failedStep(t, err) != StepRead || !errors.Is(err, ociimage.ErrNotFound) {
		t.Fatalf("missing image: %v", err)
	}
	gone := errors.New("no store")
	_, err = Fetch(ctx, FetchOptions{Ref: testRef, Open: func(context.Context) (*ociimage.Store, error) { return nil, gone }})
	if failedStep(t, err) != StepOpenStore || !errors.Is(err, gone) {
		t.Fatalf("open failed: %v", err)
	}
}

// stored finds the pinned digest under another name of the same
// repository, never under another repository's.
func TestStoredSameRepositoryOnly(t *testing.T) {
	ctx := context.Background()
	root, d := storeWithImage(t)
	st, err := ociimage.OpenStore(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := stored(ctx, st, "registry.example/ckpt/proc@"+d.String(), d); !ok || name != testRef {
		t.Fatalf("same repository: %q %v, want %s", name, ok, testRef)
	}
	if name, ok := stored(ctx, st, "registry.example/ckpt/other@"+d.String(), d); ok {
		t.Fatalf("another repository found %q", name)
	}
}

// The pod's report names each step with its remedy; a work directory that
// cannot be made is the node's configuration.
func TestPodErrorSteps(t *testing.T) {
	src := Source{Ref: "registry.example/ckpt/proc@" + godigest.FromString("x").String()}
	o := Options{RestoreDir: "/nowhere"}
	cases := []struct {
		step       Step
		wantStep   string
		wantRemedy string
	}{
		{StepOpenStore, "open cryo's image store", "check CRYO_IMAGE_STORE"},
		{StepKind, "check the checkpoint image " + src.Ref, "name an image built from a container checkpoint (`cryo image build --containerd`"},
		{StepWorkDir, "make a work directory", "(/nowhere) and its free space"},
		{StepContents, "check the checkpoint image " + src.Ref, "name an image built from a container checkpoint"},
	}
	for _, c := range cases {
		err := podError("c1", src, o, fail(c.step, errors.New("cause")))
		var se *report.StepError
		if !errors.As(err, &se) || se.Step != c.wantStep || !strings.Contains(se.Remedy, c.wantRemedy) || se.ID != "c1" {
			t.Errorf("step %d: %#v, want step %q, remedy with %q", c.step, se, c.wantStep, c.wantRemedy)
		}
	}
}
