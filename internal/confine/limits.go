package confine

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// checkLimits refuses resource limits and an OOM score the spec does not
// give. CRIU restores both from each process's core image, with its own
// CAP_SYS_RESOURCE, and has no option to leave them out (criu/cr-restore.c:
// prepare_rlimits, restore_rlims; prepare_oom_score_adj): an image can
// raise a hard limit past the spec's, or make its tasks the last the OOM
// killer picks.
//   - oom_score_adj: CRIU writes the image's value when it is set and not
//     0 (0 leaves the value the task inherits from runc). It must not be
//     lower (more protected) than the spec's process.oomScoreAdj, or, where
//     the spec has none, the restoring process's own, which runc's child
//     would inherit.
//   - rlimits: CRIU sets every resource the image lists, -1 meaning
//     infinity and a soft limit above the hard one cut down to it. The hard
//     limit must not exceed the spec's hard limit for that resource, or,
//     where the spec sets none, the restoring process's own. The soft limit
//     is held to the same bound and not to the spec's soft limit: a process
//     may raise its soft limit up to its hard limit itself (Go does so for
//     RLIMIT_NOFILE at start), so that is no right the spec withholds.
func checkLimits(im *image, spec *specs.Spec) error {
	for _, t := range im.tasks {
		tc := t.core.GetTc()
		if tc == nil {
			continue // a thread: CRIU restores limits and the score per process
		}
		if tc.OomScoreAdj != nil && tc.GetOomScoreAdj() != 0 {
			if err := checkOOM(t, int(tc.GetOomScoreAdj()), spec); err != nil {
				return err
			}
		}
		for res, r := range tc.GetRlimits().GetRlimits() {
			if err := checkRlimit(t, res, r.GetCur(), r.GetMax(), spec); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkOOM(t task, img int, spec *specs.Spec) error {
	want, from := 0, "the runtime's own, which the spec leaves"
	if spec.Process != nil && spec.Process.OOMScoreAdj != nil {
		want, from = *spec.Process.OOMScoreAdj, "process.oomScoreAdj"
	} else if own, err := ownOOMScoreAdj(); err == nil {
		want = own
	}
	if img < want {
		return &Violation{Task: t.label(), Field: "oom_score_adj", Image: strconv.Itoa(img),
			Spec: fmt.Sprintf("%d or more (%s)", want, from)}
	}
	return nil
}

func checkRlimit(t task, res int, cur, max uint64, spec *specs.Spec) error {
	name, known := rlimitNames[res]
	if !known {
		return nil // the kernel refuses an unknown resource (EINVAL)
	}
	bound, from, err := rlimitBound(res, name, spec)
	if err != nil {
		return err
	}
	if cur > max {
		cur = max // CRIU's own correction
	}
	for _, v := range []struct {
		which string
		value uint64
	}{{"hard", max}, {"soft", cur}} {
		if v.value > bound {
			return &Violation{Task: t.label(), Field: fmt.Sprintf("rlimit %s (%s)", name, v.which), Image: rlimitText(v.value),
				Spec: fmt.Sprintf("%s at most (%s)", rlimitText(bound), from)}
		}
	}
	return nil
}

// rlimitBound is the highest hard limit the spec gives resource res.
func rlimitBound(res int, name string, spec *specs.Spec) (uint64, string, error) {
	if spec.Process != nil {
		for _, r := range spec.Process.Rlimits {
			if strings.EqualFold(r.Type, name) {
				return r.Hard, "the hard limit of process.rlimits", nil
			}
		}
	}
	var own unix.Rlimit
	if err := ownRlimit(res, &own); err != nil {
		return 0, "", fmt.Errorf("confine: read this process's %s to check the checkpoint's against: %w", name, err)
	}
	return own.Max, "the runtime's own hard limit, which the spec leaves", nil
}

// ownRlimit and ownOOMScoreAdj are the restoring process's own, which runc
// and the container it starts inherit (variables for tests).
var (
	ownRlimit      = unix.Getrlimit
	ownOOMScoreAdj = func() (int, error) {
		data, err := os.ReadFile("/proc/self/oom_score_adj")
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(data)))
	}
)

func rlimitText(v uint64) string {
	if v == math.MaxUint64 {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

// rlimitNames are the resources by their number, CRIU's index in the
// image's list, with their spec names.
var rlimitNames = map[int]string{
	unix.RLIMIT_CPU: "RLIMIT_CPU", unix.RLIMIT_FSIZE: "RLIMIT_FSIZE", unix.RLIMIT_DATA: "RLIMIT_DATA",
	unix.RLIMIT_STACK: "RLIMIT_STACK", unix.RLIMIT_CORE: "RLIMIT_CORE", unix.RLIMIT_RSS: "RLIMIT_RSS",
	unix.RLIMIT_NPROC: "RLIMIT_NPROC", unix.RLIMIT_NOFILE: "RLIMIT_NOFILE", unix.RLIMIT_MEMLOCK: "RLIMIT_MEMLOCK",
	unix.RLIMIT_AS: "RLIMIT_AS", unix.RLIMIT_LOCKS: "RLIMIT_LOCKS", unix.RLIMIT_SIGPENDING: "RLIMIT_SIGPENDING",
	unix.RLIMIT_MSGQUEUE: "RLIMIT_MSGQUEUE", unix.RLIMIT_NICE: "RLIMIT_NICE", unix.RLIMIT_RTPRIO: "RLIMIT_RTPRIO",
	unix.RLIMIT_RTTIME: "RLIMIT_RTTIME",
}
