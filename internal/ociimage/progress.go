package ociimage

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"

	"github.com/cryo-gpu/cryo/internal/progress"
)

// transferTask is the progress line of one push or pull: the bytes read
// from the source, of all the blobs to move. A blob the destination already
// has is taken off the total (and named on a line of its own) rather than
// counted as moved, so that the rate is the transfer's own.
type transferTask struct {
	r     *progress.Renderer
	t     *progress.Task
	what  string
	total int64
	moved atomic.Int64 // blobs copied in this attempt
	skips atomic.Int64 // bytes skipped in this attempt
	quiet atomic.Bool  // no skip lines: a retry skips what the last attempt moved
}

func newTransferTask(r *progress.Renderer, what string, total int64) *transferTask {
	return &transferTask{r: r, t: r.Start(what, total), what: what, total: total}
}

// retry starts the count again for another attempt.
func (p *transferTask) retry(attempt int, err error) {
	p.r.Println(fmt.Sprintf("%s: attempt %d failed (%v); retrying", p.what, attempt, err))
	p.moved.Store(0)
	p.skips.Store(0)
	p.quiet.Store(true)
	p.t.Set(0)
	p.t.SetTotal(p.total)
}

func (p *transferTask) read(n int) { p.t.Add(int64(n)) }

func (p *transferTask) copied(ocispec.Descriptor) { p.moved.Add(1) }

func (p *transferTask) skipped(d ocispec.Descriptor) {
	p.t.SetTotal(p.total - p.skips.Add(d.Size))
	if isLayer(d) && !p.quiet.Load() {
		p.r.Println(fmt.Sprintf("%s: layer %s (%s) skipped: already exists", p.what, short(d), human(d.Size)))
	}
}

// end finalises the line: "skipped: already exists" when the destination
// had every blob, else done, failed or interrupted. A canceled ctx is an
// interrupt whatever error the copy returned for it.
func (p *transferTask) end(ctx context.Context, err error) {
	if err == nil && p.moved.Load() == 0 {
		p.t.Skip("already exists")
		return
	}
	p.t.End(endErr(ctx, err))
}

// endErr is how a step ended for its progress line: a step that failed
// because ctx was canceled was interrupted, whatever error it returned.
func endErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func isLayer(d ocispec.Descriptor) bool { return strings.Contains(d.MediaType, "layer") }

func short(d ocispec.Descriptor) string { return d.Digest.Encoded()[:12] }

// countingTarget counts the bytes read from the source of a copy.
type countingTarget struct {
	oras.ReadOnlyTarget
	p *transferTask
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
	p *transferTask
}

func (r *countingReader) Read(b []byte) (int, error) {
	n, err := r.ReadCloser.Read(b)
	r.p.read(n)
	return n, err
}

// isSizeMismatch recognizes oras's Content-Length check on a fetched blob.
func isSizeMismatch(err error) bool {
	return strings.Contains(err.Error(), "mismatch Content-Length")
}
