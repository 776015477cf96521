package criuimg

import (
	"fmt"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mm"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
)

// Range is a span of bytes of a pages image.
type Range struct{ Off, Len int64 }

// PageRanges returns, by pages image name, the pages that hold each
// process's command line and environment. A reader that extracted the
// pages as placeholders (an archive read for its metadata) fills these
// spans in from the archive, then reads the details with the pages: a
// few pages per process instead of all its memory on disk.
func PageRanges(dir string) (map[string][]Range, error) {
	entries, err := readImage(dir, "pstree.img", &pstree.PstreeEntry{})
	if err != nil {
		return nil, err
	}
	r := &reader{dir: dir, details: &Details{}}
	out := map[string][]Range{}
	for _, e := range entries {
		pid := int(e.(*pstree.PstreeEntry).GetPid())
		mms, err := readImage(dir, fmt.Sprintf("mm-%d.img", pid), &mm.MmEntry{})
		if err != nil || len(mms) == 0 {
			continue // no mm: nothing to read for it
		}
		pm, err := r.pagemap(pid)
		if err != nil || pm == nil {
			continue
		}
		m := mms[0].(*mm.MmEntry)
		name := fmt.Sprintf("pages-%d.img", pm.pagesID)
		out[name] = append(out[name], pm.spans(m.GetMmArgStart(), m.GetMmArgEnd())...)
		out[name] = append(out[name], pm.spans(m.GetMmEnvStart(), m.GetMmEnvEnd())...)
	}
	return out, nil
}

// spans are the pages image's spans of the dumped pages between start and
// end; none for a range that cmdline would not read either.
func (pm *pageMap) spans(start, end uint64) []Range {
	if end <= start || end-start > maxCmdline {
		return nil
	}
	var out []Range
	for addr := start - start%pageSize; addr < end; addr += pageSize {
		if off, ok := pm.offset(addr); ok {
			out = append(out, Range{Off: off - off%int64(pageSize), Len: int64(pageSize)})
		}
	}
	return out
}
