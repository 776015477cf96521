package ociimage

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// A full disk while unpacking is ErrNoSpace, with a remedy that keeps the
// image; a truncated layer is still ErrIntegrity.
func TestLayerErrNoSpace(t *testing.T) {
	l := ocispec.Descriptor{Digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Size: 1 << 20}
	for _, cause := range []error{fmt.Errorf("write pages-1.img: %w", syscall.ENOSPC), fmt.Errorf("entry: %w", archive.ErrTooLarge)} {
		err := layerErr(l, cause)
		if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrIntegrity) {
			t.Fatalf("%v: got %v, want ErrNoSpace only", cause, err)
		}
		if r := remedyFor(err); !strings.Contains(r, "free space") || strings.Contains(r, "image rm") {
			t.Fatalf("remedy %q", r)
		}
	}
	if err := layerErr(l, errors.New("unexpected EOF")); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("truncated layer: %v", err)
	}
}
