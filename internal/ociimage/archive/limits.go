package archive

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// A tar's metadata is work too: 300 000 empty files in one checkpoint part
// held a container's start for 25 s while every byte bound counted 0
// bytes. Limits bound what one tar may hold, counted before an entry is
// written, so that a crafted part is refused after its first entries past
// the bound rather than after all of them.

// The defaults of Limits. CRIU writes a few files per task (core, mm,
// pagemap, pages, fdinfo, ids, fs) and one core file per thread: a
// one-process container holds about 30, a JAX process with its 175 threads
// about 200, a container of a thousand tasks of ten threads about 15 000.
// 100 000 leaves room for the rare container larger than that. A CRIU
// image directory is flat (an export adds a level or two); the name and
// path bounds are Linux's own (NAME_MAX, PATH_MAX).
const (
	DefaultMaxEntries   = 100_000
	DefaultMaxDepth     = 32
	DefaultMaxNameBytes = 255
	DefaultMaxPathBytes = 4096
)

// HeaderCost is what every entry costs in the free-space check and the
// budget, on top of its content: a tar header's block, about what an inode
// and a directory entry take on disk. An empty file is not free.
const HeaderCost = 512

// ErrLimit is wrapped by every refusal of a tar that goes beyond Limits.
var ErrLimit = report.Sentinel("tar goes beyond the unpack limits", errdefs.ErrResourceExhausted)

// Limits bound one tar's metadata. A zero field takes its default.
type Limits struct {
	MaxEntries   int // entries of any type
	MaxDepth     int // components of an entry's name
	MaxNameBytes int // bytes of one component
	MaxPathBytes int // bytes of an entry's name or link target
	// Setting names, for the remedy, where a user raises the bound
	// (an environment variable); "": the remedy names none.
	Setting func(what string) string
}

// DefaultLimits are the bounds when none are configured.
func DefaultLimits() Limits {
	return Limits{MaxEntries: DefaultMaxEntries, MaxDepth: DefaultMaxDepth, MaxNameBytes: DefaultMaxNameBytes, MaxPathBytes: DefaultMaxPathBytes}
}

// orDefaults fills the zero fields.
func (l Limits) orDefaults() Limits {
	d := DefaultLimits()
	if l.MaxEntries <= 0 {
		l.MaxEntries = d.MaxEntries
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	if l.MaxNameBytes <= 0 {
		l.MaxNameBytes = d.MaxNameBytes
	}
	if l.MaxPathBytes <= 0 {
		l.MaxPathBytes = d.MaxPathBytes
	}
	return l
}

// The bounds a LimitError names.
const (
	LimitEntries = "entries"
	LimitDepth   = "depth"
	LimitName    = "name length"
	LimitPath    = "path length"
)

// LimitError is a tar refused for going beyond one of its Limits: which
// tar, which bound, how far it got and the bound.
type LimitError struct {
	Part  string // the tar, as the caller names it ("" when unnamed)
	What  string // LimitEntries, LimitDepth, LimitName or LimitPath
	Entry string // the entry that went beyond it
	Count int    // entries so far, or the entry's depth or length
	Cap   int
	// Setting is where the bound is raised ("": not configurable here).
	Setting string
	// Image: the bound is on the entries of all the image's tars
	// together (Budget.MaxEntries), which Part's brought beyond it.
	Image bool
}

func (e *LimitError) Error() string { return report.Render(e.Cause(), e.RemedyText()) }

// Cause is the message without the remedy (report.Remedied).
func (e *LimitError) Cause() string {
	part := "the tar"
	if e.Part != "" {
		part = e.Part
	}
	if e.Image {
		return fmt.Sprintf("%s brings the image's layers to more than %d entries together (refused at entry %d of the image, %q)", part, e.Cap, e.Count, e.Entry)
	}
	if e.What == LimitEntries {
		return fmt.Sprintf("%s holds more than %d entries (refused at entry %d, %q)", part, e.Cap, e.Count, e.Entry)
	}
	return fmt.Sprintf("%s: entry %q has a %s of %d, beyond %d", part, truncate(e.Entry, 80), e.What, e.Count, e.Cap)
}

// RemedyText is the remedy alone (report.Remedied).
func (e *LimitError) RemedyText() string {
	r := "a CRIU checkpoint holds a few files per task: do not restore this image unless it is known to be genuine"
	if e.Setting != "" {
		r += fmt.Sprintf("; for a genuine one that large, raise %s (now %d)", e.Setting, e.Cap)
	}
	return r
}

// Unwrap makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Unwrap() error { return ErrLimit }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// limiter counts one tar's entries against its Limits.
type limiter struct {
	Limits
	part    string
	entries int
}

func newLimiter(l Limits, part string) *limiter {
	return &limiter{Limits: l.orDefaults(), part: part}
}

// check counts the next entry, refusing it when the tar goes beyond a
// bound. It runs before anything of the entry is written.
func (l *limiter) check(name, linkname string) error {
	l.entries++
	if l.entries > l.MaxEntries {
		return l.refuse(LimitEntries, name, l.entries, l.MaxEntries)
	}
	for _, p := range []string{name, linkname} {
		if len(p) > l.MaxPathBytes {
			return l.refuse(LimitPath, name, len(p), l.MaxPathBytes)
		}
	}
	parts := strings.Split(strings.Trim(name, "/"), "/")
	if len(parts) > l.MaxDepth {
		return l.refuse(LimitDepth, name, len(parts), l.MaxDepth)
	}
	for _, p := range append(parts, strings.Split(linkname, "/")...) {
		if len(p) > l.MaxNameBytes {
			return l.refuse(LimitName, name, len(p), l.MaxNameBytes)
		}
	}
	return nil
}

// checkImage counts the entry against the budget's bound on the entries
// of all the tars that share it.
func (l *limiter) checkImage(b *Budget, name string) error {
	if b == nil || b.MaxEntries <= 0 {
		return nil
	}
	if b.entries++; b.entries > b.MaxEntries {
		e := l.refuse(LimitEntries, name, b.entries, b.MaxEntries).(*LimitError)
		e.Image = true
		return e
	}
	return nil
}

func (l *limiter) refuse(what, name string, n, limit int) error {
	e := &LimitError{Part: l.part, What: what, Entry: name, Count: n, Cap: limit}
	if l.Setting != nil {
		e.Setting = l.Setting(what)
	}
	return e
}

// ctxReader ends a read when ctx ends, so that one large entry does not
// outlast the caller's deadline.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}
