package shim

import (
	"testing"

	godigest "github.com/opencontainers/go-digest"
)

// The name a pod gives resolves to the image record CRI's PullImage made
// for it: normalized, a tag beside a digest dropped, the digest kept.
func TestResolveNamed(t *testing.T) {
	d := godigest.FromString("manifest")
	cases := []struct {
		named, name string
		pinned      godigest.Digest
	}{
		{"busybox", "docker.io/library/busybox:latest", ""},
		{"127.0.0.1:5000/ckpt/app:v1", "127.0.0.1:5000/ckpt/app:v1", ""},
		{"127.0.0.1:5000/ckpt/app@" + d.String(), "127.0.0.1:5000/ckpt/app@" + d.String(), d},
		{"127.0.0.1:5000/ckpt/app:v1@" + d.String(), "127.0.0.1:5000/ckpt/app@" + d.String(), d},
	}
	for _, c := range cases {
		name, pinned, err := resolveNamed(c.named)
		if err != nil || name != c.name || pinned != c.pinned {
			t.Errorf("resolveNamed(%q) = %q, %q, %v; want %q, %q", c.named, name, pinned, err, c.name, c.pinned)
		}
	}
	if _, _, err := resolveNamed("app@sha256:short"); err == nil {
		t.Error("an invalid name resolved")
	}
}
