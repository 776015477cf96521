package harness

import (
	"strconv"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// ChildrenNamed lists the children of pid whose command is comm.
func ChildrenNamed(pid int, comm string) []int {
	var out []int
	for _, p := range PidsOf(comm) {
		if v, ok := procfs.StatusField(p, "PPid"); ok && v == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}
