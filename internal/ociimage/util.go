package ociimage

import (
	"hash"
	"io"

	"github.com/opencontainers/go-digest"

	"github.com/cryo-gpu/cryo/internal/progress"
)

// digestCounter hashes and counts what is written to it.
type digestCounter struct {
	h hash.Hash
	n int64
}

func newDigestCounter() *digestCounter { return &digestCounter{h: digest.SHA256.Hash()} }

func (d *digestCounter) Write(p []byte) (int, error) {
	d.n += int64(len(p))
	return d.h.Write(p)
}

func (d *digestCounter) Digest() digest.Digest { return digest.NewDigest(digest.SHA256, d.h) }

func multi(w ...io.Writer) io.Writer { return io.MultiWriter(w...) }

// human prints a byte count in binary units.
func human(n int64) string { return progress.Human(n) }

// Human is progress.Human, for callers that have not moved to it.
func Human(n int64) string { return progress.Human(n) }
