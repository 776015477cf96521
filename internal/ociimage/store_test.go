package ociimage

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// indexManifests reads the descriptors of the store's index.json.
func indexManifests(t *testing.T, st *Store) []ocispec.Descriptor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(st.Root, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	return idx.Manifests
}

// blobCount is the number of blobs in the store.
func blobCount(t *testing.T, st *Store) int {
	t.Helper()
	e, err := os.ReadDir(filepath.Join(st.Root, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	return len(e)
}

// TestRemoveLeavesNoDescriptor: `cryo image rm` of the only tag of an
// image leaves index.json without its manifest and the blobs gone; a
// second tag of the same manifest keeps both until it goes too.
func TestRemoveLeavesNoDescriptor(t *testing.T) {
	ctx := context.Background()
	st, _, _ := build(t, nil)
	d, err := st.Resolve(ctx, "example/ckpt:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.oci.Tag(ctx, d, "example/ckpt:2"); err != nil {
		t.Fatal(err)
	}
	blobs := blobCount(t, st)
	if err := st.Remove(ctx, "example/ckpt:1"); err != nil {
		t.Fatal(err)
	}
	if m := indexManifests(t, st); len(m) != 1 || m[0].Annotations[ocispec.AnnotationRefName] != "example/ckpt:2" {
		t.Fatalf("index after removing one of two tags: %+v", m)
	}
	if n := blobCount(t, st); n != blobs {
		t.Fatalf("%d blobs after removing one of two tags, want %d", n, blobs)
	}
	if err := st.Remove(ctx, "example/ckpt:2"); err != nil {
		t.Fatal(err)
	}
	if m := indexManifests(t, st); len(m) != 0 {
		t.Fatalf("index.json keeps a dangling descriptor: %+v", m)
	}
	if n := blobCount(t, st); n != 0 {
		t.Fatalf("%d blobs left after removing the last tag", n)
	}
	if list, err := st.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("tags after removal: %v %v", list, err)
	}
}

// TestBuildRefusesBadReference: a name no registry takes is refused
// before anything is stored, with a remedy that shows a good one.
func TestBuildRefusesBadReference(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	src, err := OpenSource(fakeCheckpoint(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, ref := range []string{"BAD REF", "ckpt/App:1", "a:b:c", ""} {
		_, _, err := Build(ctx, st, src, BuildOptions{Ref: ref})
		if !errors.Is(err, ErrBadReference) || !strings.Contains(err.Error(), "remedy: name the image as a registry would") {
			t.Fatalf("build %q: %v, want ErrBadReference with its remedy", ref, err)
		}
	}
	if list, err := st.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("tags after the refusals: %v %v", list, err)
	}
	for _, ref := range []string{"example/ckpt:1", "localhost:5000/a/b:v1", "app", "app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"} {
		if err := CheckRef(ref); err != nil {
			t.Fatalf("CheckRef(%q): %v", ref, err)
		}
	}
}
