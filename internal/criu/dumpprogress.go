package criu

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PagesPoll is how often the dump's line measures the pages files.
const PagesPoll = 100 * time.Millisecond

// PagesBytes is what CRIU has written of the memory so far: the size of
// the pages-*.img files of its image directory. CRIU writes each one from
// start to end, so their sizes only grow.
func PagesBytes(dir string) int64 {
	matches, _ := filepath.Glob(filepath.Join(dir, "pages-*.img"))
	var n int64
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil {
			n += st.Size()
		}
	}
	return n
}

// DumpEstimate is the memory CRIU will write for pids: their anonymous and
// shared memory, resident or swapped (file-backed pages that are clean stay
// out of the images). It is taken after the CUDA suspend, which moved the
// GPU memory into the processes' host memory; should gpu (the bytes the
// suspend moved) not show there, it is added. An estimate: the line shows
// it with "~" and follows CRIU when it writes more.
func DumpEstimate(pids []int, gpu int64) int64 {
	var n int64
	for _, p := range pids {
		n += dumpableMemory(p)
	}
	if n < gpu {
		n += gpu
	}
	return n
}

// dumpableMemory reads one process's smaps_rollup (Linux 4.14+), or its
// statm on older kernels.
func dumpableMemory(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return statmMemory(pid)
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || fields[2] != "kB" {
			continue
		}
		switch fields[0] {
		case "Anonymous:", "Swap:", "Pss_Shmem:":
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			n += kb << 10
		}
	}
	return n
}

// statmMemory is resident minus shared (file-backed) pages.
func statmMemory(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0
	}
	var size, resident, shared int64
	if _, err := fmt.Sscan(string(data), &size, &resident, &shared); err != nil || resident < shared {
		return 0
	}
	return (resident - shared) * int64(os.Getpagesize())
}
