package ociimage

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
)

// progress prints the bytes moved once a second and a line per blob.
type progress struct {
	w     io.Writer
	what  string
	total int64
	done  atomic.Int64
	start time.Time
	quit  chan struct{}
	once  sync.Once
	mu    sync.Mutex
}

func newProgress(w io.Writer, what string, total int64) *progress {
	p := &progress{w: w, what: what, total: total, start: time.Now(), quit: make(chan struct{})}
	if w != nil {
		go p.tick()
	}
	return p
}

func (p *progress) tick() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			p.line("")
		}
	}
}

func (p *progress) line(suffix string) {
	if p.w == nil {
		return
	}
	n := p.done.Load()
	secs := time.Since(p.start).Seconds()
	pct := 100.0
	if p.total > 0 {
		pct = min(100, 100*float64(n)/float64(p.total))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%s: %s / %s (%.0f%%) %s/s%s\n", p.what, human(n), human(p.total), pct, human(int64(float64(n)/max(secs, 0.001))), suffix)
}

func (p *progress) copied(d ocispec.Descriptor) {
	if p.w != nil && isLayer(d) {
		p.line(fmt.Sprintf("  [%s %s done]", short(d), human(d.Size)))
	}
}

func (p *progress) skipped(d ocispec.Descriptor) {
	p.done.Add(d.Size)
	if p.w != nil && isLayer(d) {
		p.line(fmt.Sprintf("  [%s already there]", short(d)))
	}
}

func (p *progress) stop() {
	p.once.Do(func() {
		close(p.quit)
		if p.w != nil {
			p.line("  done in " + time.Since(p.start).Round(time.Millisecond).String())
		}
	})
}

func isLayer(d ocispec.Descriptor) bool { return strings.Contains(d.MediaType, "layer") }

func short(d ocispec.Descriptor) string { return d.Digest.Encoded()[:12] }

// countingTarget counts the bytes read from the source of a copy.
type countingTarget struct {
	oras.ReadOnlyTarget
	p *progress
}

func (c *countingTarget) Fetch(ctx context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
	rc, err := c.ReadOnlyTarget.Fetch(ctx, d)
	if err != nil {
		return nil, err
	}
	return &countingReader{ReadCloser: rc, p: c.p}, nil
}

type countingReader struct {
	io.ReadCloser
	p *progress
}

func (r *countingReader) Read(b []byte) (int, error) {
	n, err := r.ReadCloser.Read(b)
	r.p.done.Add(int64(n))
	return n, err
}

// isSizeMismatch recognizes oras's Content-Length check on a fetched blob.
func isSizeMismatch(err error) bool {
	return strings.Contains(err.Error(), "mismatch Content-Length")
}
