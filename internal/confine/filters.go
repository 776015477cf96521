package confine

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// checkSeccomp checks each thread's seccomp state, as CRIU restores it
// (SeccompThreadChain: the main thread's old task-core fields override its
// own, and strict mode is a filter of its own), against the spec's filter:
// the chain must be at least as strict as the spec's on every syscall, and
// no filter at all passes only a spec that sets none.
func checkSeccomp(im *image, spec *specs.Spec) error {
	if spec.Linux == nil || spec.Linux.Seccomp == nil {
		return nil
	}
	for _, t := range im.tasks {
		chain, err := SeccompThreadChain(im.filters, t.core, t.tid == t.pid)
		if err != nil {
			return fmt.Errorf("%s: %w", t.label(), err)
		}
		if err := CheckSeccomp(spec.Linux.Seccomp, chain); err != nil {
			return &Violation{Task: t.label(), Field: "seccomp", Image: seccompLabel(len(chain)), Spec: "the spec's filter (" + err.Error() + ")"}
		}
	}
	return nil
}

func seccompLabel(n int) string {
	if n == 0 {
		return "no filter"
	}
	return fmt.Sprintf("a chain of %d filter(s) weaker than the spec's", n)
}
