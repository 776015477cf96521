package criuimg

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/pagemap"
	"google.golang.org/protobuf/encoding/protowire"
)

// Page map flags (CRIU's pagemap.h): a range is in this dump's pages
// image when it is present and not in a parent (pre-dump) image; lazy
// ranges are fetched at restore.
const (
	pageParent  = 1 << 0
	pageLazy    = 1 << 1
	pagePresent = 1 << 2
)

// pageSize is the dumping host's page size; CRIU images are restored on
// the same architecture.
var pageSize = uint64(os.Getpagesize())

// maxCmdline bounds the command line read from pages: argv is at most a
// few hundred KiB (ARG_MAX is a quarter of the stack limit).
const maxCmdline = 2 << 20

// nrPages is a range's length in pages. CRIU 4.2 moved it to a 64-bit
// field (5, nr_pages) and leaves the old one (2) zero; go-criu v7 knows
// only the old one, so the new one is read from the unknown fields.
func nrPages(e *pagemap.PagemapEntry) uint64 {
	if n := e.GetNrPages(); n != 0 {
		return uint64(n)
	}
	b := e.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		if num == pagemapNrPages64 && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b)
			return v
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0
		}
		b = b[n:]
	}
	return 0
}

// pagemapNrPages64 is pagemap_entry's nr_pages field from CRIU 4.2.
const pagemapNrPages64 = 5

type pageMap struct {
	pagesID uint32
	entries []*pagemap.PagemapEntry
}

// inImage reports whether the range's pages are in this dump's pages
// image; images from before the flags mark the parent's with in_parent.
func inImage(e *pagemap.PagemapEntry) bool {
	if f := e.GetFlags(); f != 0 {
		return f&pagePresent != 0 && f&pageParent == 0
	}
	return !e.GetInParent()
}

func (pm *pageMap) bytes() int64 {
	var n int64
	for _, e := range pm.entries {
		if inImage(e) {
			n += int64(nrPages(e) * pageSize)
		}
	}
	return n
}

// pagemap reads pagemap-PID.img: its head names the pages image, the rest
// are the dumped ranges in the order of their pages. Nil when missing.
func (r *reader) pagemap(pid int) (*pageMap, error) {
	name := fmt.Sprintf("pagemap-%d.img", pid)
	entries, err := readImage(r.dir, name, &pagemap.PagemapHead{})
	if err != nil || len(entries) == 0 {
		return nil, r.optional(name, err)
	}
	head, ok := entries[0].(*pagemap.PagemapHead)
	if !ok {
		return nil, &ImageError{Dir: r.dir, File: name, Reason: "no page map head"}
	}
	pm := &pageMap{pagesID: head.GetPagesId()}
	for _, e := range entries[1:] {
		pm.entries = append(pm.entries, e.(*pagemap.PagemapEntry))
	}
	return pm, nil
}

// offset is where the page holding vaddr lies in the pages image, or
// false when it was not dumped here.
func (pm *pageMap) offset(vaddr uint64) (int64, bool) {
	var off uint64
	for _, e := range pm.entries {
		size := nrPages(e) * pageSize
		if !inImage(e) {
			continue
		}
		if vaddr >= e.GetVaddr() && vaddr < e.GetVaddr()+size {
			return int64(off + vaddr - e.GetVaddr()), true
		}
		off += size
	}
	return 0, false
}

// cmdline reads argv (the NUL-separated strings between arg_start and
// arg_end) from the pages image, as checkpointctl does, a page at a time.
// A command line that cannot be read (pages not at hand, a page not
// dumped, all zeros) is nil: the caller shows comm instead.
func (r *reader) cmdline(pm *pageMap, start, end uint64) []string {
	if end <= start || end-start > maxCmdline {
		return nil
	}
	f, err := os.Open(filepath.Join(r.dir, fmt.Sprintf("pages-%d.img", pm.pagesID)))
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := make([]byte, 0, end-start)
	for addr := start; addr < end; {
		n := min(end-addr, pageSize-addr%pageSize)
		off, ok := pm.offset(addr)
		if !ok {
			return nil
		}
		chunk := make([]byte, n)
		if _, err := f.ReadAt(chunk, off); err != nil {
			return nil // a short pages image: no command line, not a guess
		}
		buf = append(buf, chunk...)
		addr += n
	}
	return splitArgs(buf)
}

func splitArgs(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}
