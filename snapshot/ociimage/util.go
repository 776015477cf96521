package ociimage

import (
	"fmt"
	"hash"
	"io"

	"github.com/opencontainers/go-digest"
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
func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Human is human for the CLI.
func Human(n int64) string { return human(n) }
