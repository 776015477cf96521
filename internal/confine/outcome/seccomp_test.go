package outcome

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/confine"
	"github.com/cryo-gpu/cryo/internal/criuimg"
)

// tsyncDir is confine's real checkpoint of a runc container with a
// seccomp profile (libseccomp's filter, installed with TSYNC).
const tsyncDir = "../testdata/tsync"

// realChain is the chain of that checkpoint's filters, oldest first, as
// the kernel reports it, and the spec's seccomp it was made from.
func realChain(t *testing.T) ([][]byte, *specs.LinuxSeccomp) {
	t.Helper()
	ents, err := criuimg.ReadImage(tsyncDir, "seccomp.img", &seccomp.SeccompEntry{})
	must(t, err)
	filters := ents[0].(*seccomp.SeccompEntry).GetSeccompFilters()
	chain, err := confine.SeccompChain(filters, uint32(len(filters)-1))
	must(t, err)
	slices.Reverse(chain)
	data, err := os.ReadFile(filepath.Join(tsyncDir, "spec.json"))
	must(t, err)
	var s specs.Spec
	must(t, json.Unmarshal(data, &s))
	return chain, s.Linux.Seccomp
}

// weaken returns prog with every ERRNO return turned into ALLOW: the
// same length and the same count of filters, a weaker body.
func weaken(t *testing.T, prog []byte) []byte {
	t.Helper()
	out, n := slices.Clone(prog), 0
	for i := 0; i+8 <= len(out); i += 8 {
		code, k := binary.LittleEndian.Uint16(out[i:]), binary.LittleEndian.Uint32(out[i+4:])
		if code == unix.BPF_RET|unix.BPF_K && k&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO {
			binary.LittleEndian.PutUint32(out[i+4:], unix.SECCOMP_RET_ALLOW)
			n++
		}
	}
	if n == 0 {
		t.Fatal("the filter returns no ERRNO to weaken")
	}
	return out
}

// errnoAll is "ret ERRNO(EPERM)": the filter of runcSpec's seccomp.
var errnoAll = func() []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint16(b, unix.BPF_RET|unix.BPF_K)
	binary.LittleEndian.PutUint32(b[4:], unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	return b
}()

// writeFilters writes chains as cryo's CRIU does (patch 0005).
func writeFilters(t *testing.T, chains map[int][][]byte, complete bool) string {
	t.Helper()
	dir := t.TempDir()
	for tid, chain := range chains {
		for i, p := range chain {
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d-%d.bpf", tid, i)), p, 0o600))
		}
	}
	if complete {
		write(t, filepath.Join(dir, FiltersComplete), "threads 1 filters 1\n")
	}
	return dir
}

func TestReadFilters(t *testing.T) {
	a, b := []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte{8, 7, 6, 5, 4, 3, 2, 1}
	f, err := ReadFilters(writeFilters(t, map[int][][]byte{101: {a, b}, 7: {b}}, true))
	if err != nil || len(f) != 2 || len(f[101]) != 2 || f[101][0][0] != 1 || f[101][1][0] != 8 || f[7][0][0] != 8 {
		t.Fatalf("got %v, %v", f, err)
	}
	if _, err := ReadFilters(writeFilters(t, map[int][][]byte{101: {a}}, false)); !errors.Is(err, ErrNoFilters) {
		t.Errorf("no complete mark: got %v, want ErrNoFilters", err)
	}
	dir := writeFilters(t, map[int][][]byte{101: {a, b}}, true)
	must(t, os.Remove(filepath.Join(dir, "101-0.bpf")))
	if _, err := ReadFilters(dir); err == nil || !strings.Contains(err.Error(), "filter 0 is missing") {
		t.Errorf("a lost filter: got %v", err)
	}
	write(t, filepath.Join(dir, "stray"), "")
	if _, err := ReadFilters(dir); err == nil || !strings.Contains(err.Error(), "none of CRIU's") {
		t.Errorf("a stray file: got %v", err)
	}
}

// The fake tree of runc's restore, with the real filter of a runc
// container on every thread, and the spec it was made from.
func TestFiltersOnTheOutcome(t *testing.T) {
	chain, sc := realChain(t)
	weak := append([][]byte{}, chain...)
	weak[len(weak)-1] = weaken(t, weak[len(weak)-1])
	all := func(c [][]byte) Filters { return Filters{100: c, 101: c, 102: c} }
	stricter := append(slices.Clone(chain), errnoAll)
	cases := []struct {
		name    string
		filters Filters
		count   int    // the kernel's count; 0 is len(chain)
		field   string // "" passes, "none" is ErrNoFilters
	}{
		{"the spec's own filter", all(chain), 0, ""},
		{"one thread's body weakened", Filters{100: chain, 101: weak, 102: chain}, 0, "seccomp filter"},
		{"a stricter filter added", all(stricter), len(stricter), ""},
		{"CRIU wrote none", nil, 0, "none"},
		{"a thread CRIU left out", Filters{100: chain, 102: chain}, 0, "none"},
		{"a filter CRIU left out", all(chain), len(stricter), "none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := []fakeTask{runcTask(100, 101), runcTask(102)}
			n := fmt.Sprint(cmp.Or(tc.count, len(chain)))
			for i := range ts {
				ts[i].status = strings.Replace(ts[i].status, "Seccomp_filters:	1", "Seccomp_filters:	"+n, 1)
			}
			spec, w := runcSpec(), runcWant
			w.Limits = map[string]uint64{"RLIMIT_CPU": unlimited, "RLIMIT_NPROC": 4096}
			spec.Linux.Seccomp, w.Spec, w.Filters = sc, spec, tc.filters
			proc := writeFake(t, ts)
			err := Check(proc, []int{100, 102}, w)
			var v *Violation
			switch tc.field {
			case "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case "none":
				if !errors.Is(err, ErrNoFilters) || errors.As(err, &v) {
					t.Fatalf("got %v, want ErrNoFilters", err)
				}
			default:
				if !errors.As(err, &v) || v.Field != tc.field || v.Task != "restored thread 101 of process 100" {
					t.Fatalf("got %v, want a violation of %s by thread 101", err, tc.field)
				}
				t.Logf("%v", err)
			}
		})
	}
}

// A verdict of ErrNoFilters names CRIU's remedy, after a round trip
// through the bundle.
func TestNoFiltersVerdict(t *testing.T) {
	dir := t.TempDir()
	must(t, WriteVerdict(dir, Verdict{Error: "outcome: restored process 1: " + ErrNoFilters.Error(), NoFilters: true}))
	v, ok := ReadVerdict(dir)
	if !ok {
		t.Fatal("no verdict")
	}
	err := v.Err()
	if !errors.Is(err, ErrNoFilters) || !errors.Is(err, ErrRefused) || RemedyFor(err, "") != RemedyNoFilters {
		t.Fatalf("got %v (remedy %q)", err, RemedyFor(err, ""))
	}
	if !strings.Contains(RemedyNoFilters, "make deps") {
		t.Errorf("the remedy names no way to cryo's CRIU: %s", RemedyNoFilters)
	}
}
