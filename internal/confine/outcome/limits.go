package outcome

import (
	"fmt"
	"strconv"
	"strings"
)

// limitNames maps /proc/PID/limits' rows to the spec's rlimit types.
var limitNames = map[string]string{
	"Max cpu time": "RLIMIT_CPU", "Max file size": "RLIMIT_FSIZE", "Max data size": "RLIMIT_DATA",
	"Max stack size": "RLIMIT_STACK", "Max core file size": "RLIMIT_CORE", "Max resident set": "RLIMIT_RSS",
	"Max processes": "RLIMIT_NPROC", "Max open files": "RLIMIT_NOFILE", "Max locked memory": "RLIMIT_MEMLOCK",
	"Max address space": "RLIMIT_AS", "Max file locks": "RLIMIT_LOCKS", "Max pending signals": "RLIMIT_SIGPENDING",
	"Max msgqueue size": "RLIMIT_MSGQUEUE", "Max nice priority": "RLIMIT_NICE", "Max realtime priority": "RLIMIT_RTPRIO",
	"Max realtime timeout": "RLIMIT_RTTIME",
}

// unlimited is RLIM_INFINITY.
const unlimited = ^uint64(0)

// ReadLimits reads the hard limits of a /proc/PID/limits file by type.
func ReadLimits(path string) (map[string]uint64, error) {
	data, err := readProc(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(data), "\n") {
		for row, typ := range limitNames {
			rest, ok := strings.CutPrefix(line, row+" ")
			if !ok {
				continue
			}
			f := strings.Fields(rest)
			if len(f) < 2 {
				return nil, fmt.Errorf("outcome: %s: unexpected row %q", path, line)
			}
			out[typ] = parseLimit(f[1])
		}
	}
	return out, nil
}

func parseLimit(s string) uint64 {
	if s == "unlimited" {
		return unlimited
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return unlimited // unreadable counts as the most it could be
	}
	return n
}

func limitText(n uint64) string {
	if n == unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(n, 10)
}

// limits checks each hard limit against the spec's rlimit of its type, or
// the runtime's own for the types the spec leaves out: CRIU restores the
// image's limits, and a raised hard limit is a right.
func (c *checker) limits(t taskRef) error {
	got, err := ReadLimits(t.file("limits"))
	if err != nil {
		return err
	}
	max := map[string]uint64{}
	for k, v := range c.w.Limits {
		max[k] = v
	}
	if c.w.Spec.Process != nil {
		for _, r := range c.w.Spec.Process.Rlimits {
			max[r.Type] = r.Hard
		}
	}
	for typ, hard := range got {
		if m, ok := max[typ]; ok && hard > m {
			return violation(t, "hard limit "+typ, limitText(hard), limitText(m))
		}
	}
	return nil
}

// oomScoreAdj checks that the task is no less likely to be OOM-killed
// than the spec says (or the runtime's default): a lower score shields it
// at the host's expense.
func (c *checker) oomScoreAdj(t taskRef) error {
	got, err := ReadOOMScoreAdj(t.file("oom_score_adj"))
	if err != nil {
		return err
	}
	min, from := c.w.OOMScoreAdj, "the runtime's default"
	if p := c.w.Spec.Process; p != nil && p.OOMScoreAdj != nil {
		min, from = *p.OOMScoreAdj, "the spec's"
	}
	if got < min {
		return violation(t, "oom_score_adj", strconv.Itoa(got), fmt.Sprintf("%d (%s) or more", min, from))
	}
	return nil
}

// ReadOOMScoreAdj reads a /proc/PID/oom_score_adj file.
func ReadOOMScoreAdj(path string) (int, error) {
	data, err := readProc(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}
