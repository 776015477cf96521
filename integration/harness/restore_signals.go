package harness

import (
	"os"
	"strconv"
	"strings"
)

// HoldersOf lists the processes running prog that hold a file under dir
// open: on a machine shared with other runs, the CRIU of this test.
func HoldersOf(prog, dir string) []int {
	var pids []int
	for _, pid := range PidsOf(prog) {
		fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, dir) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
