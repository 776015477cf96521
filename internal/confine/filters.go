package confine

import (
	"fmt"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// checkSeccomp checks each thread's seccomp state, as CRIU restores it
// (SeccompThreadChain: the main thread's old task-core fields override its
// own, and strict mode is a filter of its own), against the spec's filter:
// the chain must be at least as strict as the spec's on every syscall, and
// no filter at all passes only a spec that sets none.
//
// When every thread of a process shares one chain, CRIU records it on the
// main thread alone, flagged SECCOMP_FILTER_FLAG_TSYNC, and none on the
// others: the restore installs it on the main thread and the kernel
// copies it to every thread (seccomp.c, try_use_tsync). A thread without a
// chain of its own therefore gets the main thread's chain up to its newest
// TSYNC filter.
func checkSeccomp(im *image, spec *specs.Spec) error {
	if spec.Linux == nil || spec.Linux.Seccomp == nil {
		return nil
	}
	synced := map[int][][]byte{}
	for _, t := range im.tasks {
		if t.tid == t.pid {
			chain, err := tsyncChain(im.filters, t.core)
			if err != nil {
				return fmt.Errorf("%s: %w", t.label(), err)
			}
			synced[t.pid] = chain
		}
	}
	for _, t := range im.tasks {
		chain, err := SeccompThreadChain(im.filters, t.core, t.tid == t.pid)
		if err != nil {
			return fmt.Errorf("%s: %w", t.label(), err)
		}
		if len(chain) == 0 && t.tid != t.pid {
			chain = synced[t.pid]
		}
		if err := CheckSeccomp(spec.Linux.Seccomp, chain); err != nil {
			return &Violation{Task: t.label(), Field: "seccomp", Image: seccompLabel(len(chain)), Spec: "the spec's filter (" + err.Error() + ")"}
		}
	}
	return nil
}

// tsyncChain is the chain a main thread's TSYNC filter gives every thread
// of its process: from its newest filter flagged TSYNC down. None without
// such a filter.
func tsyncChain(filters []*seccomp.SeccompFilter, leader *criucore.CoreEntry) ([][]byte, error) {
	tc := leader.GetThreadCore()
	mode, index := tc.GetSeccompMode(), tc.GetSeccompFilter()
	if task := leader.GetTc(); task != nil {
		if task.OldSeccompMode != nil {
			mode = task.GetOldSeccompMode()
		}
		if task.OldSeccompFilter != nil {
			index = task.GetOldSeccompFilter()
		}
	}
	if mode != criucore.SeccompMode_filter {
		return nil, nil
	}
	for i, n := index, 0; int(i) < len(filters) && n <= len(filters); n++ {
		f := filters[i]
		if f.GetFlags()&unix.SECCOMP_FILTER_FLAG_TSYNC != 0 {
			return SeccompChain(filters, i)
		}
		if f.Prev == nil {
			return nil, nil
		}
		i = f.GetPrev()
	}
	return nil, fmt.Errorf("%w: the main thread's chain from filter %d is not a chain", ErrSeccompMalformed, index)
}

func seccompLabel(n int) string {
	if n == 0 {
		return "no filter"
	}
	return fmt.Sprintf("a chain of %d filter(s) weaker than the spec's", n)
}
