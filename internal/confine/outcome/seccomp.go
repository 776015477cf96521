package outcome

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/confine"
)

// At pre-resume CRIU is the tracer of every restored thread, and only a
// tracer may read a thread's seccomp filters (PTRACE_SECCOMP_GET_FILTER).
// cryo's CRIU (patch 0005, contrib/criu) writes them, just before it runs
// this check, into $CRYO_CRIU_SECCOMP_DIR/<its pid>/: <tid>-<index>.bpf,
// the raw struct sock_filter array of each filter of each restored thread
// (index 0 the oldest), and "complete" once all are written.

// FiltersComplete is the file CRIU writes after the last filter.
const FiltersComplete = "complete"

// ErrNoFilters marks a restore whose CRIU wrote no seccomp filters of the
// restored threads: a CRIU without cryo's patch 0005, or one that failed
// to fetch them. A spec with seccomp cannot be vouched for without them.
var ErrNoFilters = errors.New("CRIU wrote no seccomp filters of the restored threads (it lacks cryo's patch 0005, or could not fetch them)")

// RemedyNoFilters is what to do about ErrNoFilters.
const RemedyNoFilters = "install cryo's CRIU with its patches (make deps, or the bundle's sbin/criu as $CRYO_CRIU), " +
	"which writes the restored threads' seccomp filters for this check"

// Filters is each restored thread's seccomp chain as the kernel reports
// it, by host tid: the raw programs, the oldest first.
type Filters map[int][][]byte

// ReadFilters reads the filters CRIU wrote into dir; a dir without the
// "complete" mark is ErrNoFilters, and any other file there is an error
// (the set is CRIU's alone).
func ReadFilters(dir string) (Filters, error) {
	if _, err := os.Stat(filepath.Join(dir, FiltersComplete)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoFilters, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("outcome: read the seccomp filters: %w", err)
	}
	byTID := map[int]map[int][]byte{}
	for _, e := range ents {
		if e.Name() == FiltersComplete {
			continue
		}
		tid, idx, ok := filterName(e.Name())
		if !ok || !e.Type().IsRegular() {
			return nil, fmt.Errorf("outcome: %s in the seccomp filter directory %s is none of CRIU's", e.Name(), dir)
		}
		data, err := readProc(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if byTID[tid] == nil {
			byTID[tid] = map[int][]byte{}
		}
		byTID[tid][idx] = data
	}
	return chains(byTID)
}

// filterName parses "<tid>-<index>.bpf".
func filterName(name string) (tid, idx int, ok bool) {
	base, found := strings.CutSuffix(name, ".bpf")
	t, i, cut := strings.Cut(base, "-")
	if !found || !cut {
		return 0, 0, false
	}
	tid, err1 := strconv.Atoi(t)
	idx, err2 := strconv.Atoi(i)
	return tid, idx, err1 == nil && err2 == nil && tid > 0 && idx >= 0
}

// chains orders each thread's filters by index; a gap means a lost file.
func chains(byTID map[int]map[int][]byte) (Filters, error) {
	out := Filters{}
	for tid, m := range byTID {
		idx := make([]int, 0, len(m))
		for i := range m {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for want, i := range idx {
			if i != want {
				return nil, fmt.Errorf("outcome: thread %d: seccomp filter %d is missing", tid, want)
			}
			out[tid] = append(out[tid], m[i])
		}
	}
	return out, nil
}

// FiltersDir is the directory CRIU pid wrote its filters into, below top
// ($CRYO_CRIU_SECCOMP_DIR).
func FiltersDir(top string, criuPID int) string { return filepath.Join(top, strconv.Itoa(criuPID)) }

// filters checks one thread's chain, as the kernel reports it, against
// the spec's seccomp with confine's evaluation: any syscall, architecture
// or arguments the chain lets through more than the spec's filter would
// is an excess. Threads mostly share one chain, so each distinct chain is
// evaluated once per Check.
func (c *checker) filters(t taskRef) error {
	sp := c.w.Spec
	if sp.Linux == nil || sp.Linux.Seccomp == nil {
		return nil
	}
	if c.w.Filters == nil {
		return fmt.Errorf("outcome: %s: %w", t.label(), ErrNoFilters)
	}
	chain := c.w.Filters[t.tid]
	key := chainKey(chain)
	err, seen := c.seccomp[key]
	if !seen {
		err = confine.CheckSeccomp(sp.Linux.Seccomp, chain)
		c.seccomp[key] = err
	}
	if err == nil {
		return nil
	}
	got, want := err.Error(), "its filter"
	var se *confine.SeccompError
	if errors.As(err, &se) {
		got = fmt.Sprintf("%s for %s (%s syscall %d)", se.Image, se.Syscall, se.Arch, se.Number)
		if se.Args != [6]uint64{} {
			got += fmt.Sprintf(" with arguments %#x", se.Args)
		}
		want = se.Spec
		if se.Unsure {
			got, want = "a chain that decides on its arguments in a way that cannot be checked", se.Spec+" for "+se.Syscall
		}
	}
	return violation(t, "seccomp filter", got, want)
}

// chainKey identifies a chain by its programs' bytes and boundaries.
func chainKey(chain [][]byte) string {
	h := sha256.New()
	for _, p := range chain {
		h.Write([]byte(strconv.Itoa(len(p)) + ":"))
		h.Write(p)
	}
	return string(h.Sum(nil))
}
