package archive

import (
	"archive/tar"
	"context"
	"errors"
	"io"
)

// Bounded passes the tar stream r through unchanged to a reader that
// another extractor consumes (containerd's archive.Apply for a rootfs
// diff), while it parses the same bytes and ends the stream, with a
// *LimitError, at the first entry beyond o.Limits, or with ctx's cause
// when ctx ends. The caller closes it when done, which ends its parsing.
func Bounded(ctx context.Context, r io.Reader, o Options) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(parseThrough(ctx, r, pw, newLimiter(o.Limits, o.Part))) }()
	return pr
}

// parseThrough copies r to w while it parses it as a tar, checking every
// header against lim before its bytes are written on.
func parseThrough(ctx context.Context, r io.Reader, w io.Writer, lim *limiter) error {
	hold := &heldWriter{w: w}
	tr := tar.NewReader(io.TeeReader(ctxReader{ctx: ctx, r: r}, hold))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if err := hold.release(); err != nil {
				return err
			}
			_, err = io.Copy(w, ctxReader{ctx: ctx, r: r}) // the padding after the end
			return stopped(ctx, err)
		}
		if err != nil {
			return stopped(ctx, err)
		}
		if err := lim.check(hdr.Name, hdr.Linkname); err != nil {
			return err
		}
		if err := hold.release(); err != nil {
			return err
		}
	}
}

// heldWriter keeps what tar.Reader reads for a header until the header
// has been checked, so that the extractor does not get a refused entry's
// header (but for a PAX header of more than 1 MiB, which is passed on
// early and then cut off). An entry's content goes on once 1 MiB of it
// is held: tar.Reader reads it only to skip to the next header.
type heldWriter struct {
	w    io.Writer
	held []byte
}

func (h *heldWriter) Write(p []byte) (int, error) {
	h.held = append(h.held, p...)
	if len(h.held) >= 1<<20 {
		// Content, not a header (headers are a few blocks, PAX records
		// at most 1 MiB): pass it on.
		if err := h.release(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (h *heldWriter) release() error {
	if len(h.held) == 0 {
		return nil
	}
	_, err := h.w.Write(h.held)
	h.held = h.held[:0]
	return err
}
