package harness

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// GpusOf returns the UUIDs of the GPUs on which pid holds memory.
func GpusOf(t *testing.T, pid int) []string {
	t.Helper()
	out := Run(t, 30*time.Second, nil, "nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader")
	var on []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) == 2 && strings.TrimSpace(f[0]) == strconv.Itoa(pid) {
			on = append(on, strings.TrimSpace(f[1]))
		}
	}
	return on
}
