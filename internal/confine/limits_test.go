package confine

import (
	"fmt"
	"math"
	"os"
	"testing"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// TestMain gives the checks the resource limits of the host the test
// checkpoints were taken on (the highest of the two), as their restoring
// process: RLIMIT_NPROC's and
// RLIMIT_SIGPENDING's defaults follow the host's memory, and a checkpoint
// restored under lower limits than it ran with is refused (TestRlimits).
func TestMain(m *testing.M) {
	taken := map[int]unix.Rlimit{}
	for _, dir := range []string{runcDir, "testdata/tsync"} {
		im, err := readImage(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for res, r := range im.tasks[0].core.GetTc().GetRlimits().GetRlimits() {
			have := taken[res]
			taken[res] = unix.Rlimit{Cur: max(have.Cur, r.GetCur()), Max: max(have.Max, r.GetMax())}
		}
	}
	ownRlimit = func(res int, r *unix.Rlimit) error {
		*r = taken[res]
		return nil
	}
	ownOOMScoreAdj = func() (int, error) { return 0, nil }
	os.Exit(m.Run())
}

// editTC rewrites the task core of the checkpoint's processes.
func editTC(t *testing.T, fn func(*criucore.TaskCoreEntry)) string {
	t.Helper()
	d := copyImages(t)
	for _, name := range []string{"core-1.img", "core-7.img"} {
		edit(t, d, name, &criucore.CoreEntry{}, func(m proto.Message) {
			if tc := m.(*criucore.CoreEntry).GetTc(); tc != nil {
				fn(tc)
			}
		})
	}
	return d
}

func TestOOMScoreAdj(t *testing.T) {
	protect := func(v int32) func(*criucore.TaskCoreEntry) {
		return func(tc *criucore.TaskCoreEntry) { tc.OomScoreAdj = proto.Int32(v) }
	}
	t.Run("below the runtime's own", func(t *testing.T) {
		refused(t, Check(editTC(t, protect(-1000)), runcSpec(t)), "oom_score_adj is -1000", "0 or more (the runtime's own")
	})
	t.Run("below the spec's", func(t *testing.T) {
		s := runcSpec(t)
		s.Process.OOMScoreAdj = intp(500)
		refused(t, Check(editTC(t, protect(100)), s), "oom_score_adj is 100", "500 or more (process.oomScoreAdj)")
	})
	t.Run("the spec's or above passes", func(t *testing.T) {
		s := runcSpec(t)
		s.Process.OOMScoreAdj = intp(-500)
		if err := Check(editTC(t, protect(-500)), s); err != nil {
			t.Fatal(err)
		}
	})
	// CRIU writes no score of 0: the task keeps what it inherits from runc.
	t.Run("zero is inherited", func(t *testing.T) {
		s := runcSpec(t)
		s.Process.OOMScoreAdj = intp(900)
		if err := Check(editTC(t, protect(0)), s); err != nil {
			t.Fatal(err)
		}
	})
}

func intp(v int) *int { return &v }

func setRlimit(res int, cur, max uint64) func(*criucore.TaskCoreEntry) {
	return func(tc *criucore.TaskCoreEntry) {
		r := tc.GetRlimits().GetRlimits()[res]
		r.Cur, r.Max = proto.Uint64(cur), proto.Uint64(max)
	}
}

func TestRlimits(t *testing.T) {
	// The spec sets RLIMIT_NOFILE to 1024:1024.
	t.Run("hard above the spec's", func(t *testing.T) {
		refused(t, Check(editTC(t, setRlimit(unix.RLIMIT_NOFILE, 1024, 1<<20)), runcSpec(t)),
			"rlimit RLIMIT_NOFILE (hard) is 1048576", "1024 at most (the hard limit of process.rlimits)")
	})
	// -1 is infinity for CRIU; a soft limit above the hard one is cut down
	// to it, and an unlimited hard limit is still above the spec's.
	t.Run("unlimited", func(t *testing.T) {
		refused(t, Check(editTC(t, setRlimit(unix.RLIMIT_NOFILE, math.MaxUint64, math.MaxUint64)), runcSpec(t)),
			"RLIMIT_NOFILE (hard) is unlimited")
	})
	t.Run("soft cut to hard passes", func(t *testing.T) {
		if err := Check(editTC(t, setRlimit(unix.RLIMIT_NOFILE, math.MaxUint64, 512)), runcSpec(t)); err != nil {
			t.Fatal(err)
		}
	})
	// A process may raise its soft limit to its hard limit itself.
	t.Run("soft above the spec's soft passes", func(t *testing.T) {
		s := runcSpec(t)
		s.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024}}
		if err := Check(editTC(t, setRlimit(unix.RLIMIT_NOFILE, 4096, 4096)), s); err != nil {
			t.Fatal(err)
		}
	})
	// A resource the spec leaves is held to the restoring process's own.
	t.Run("unset type above the runtime's own", func(t *testing.T) {
		var own unix.Rlimit
		if err := ownRlimit(unix.RLIMIT_MEMLOCK, &own); err != nil {
			t.Fatal(err)
		}
		refused(t, Check(editTC(t, setRlimit(unix.RLIMIT_MEMLOCK, own.Max, own.Max+1)), runcSpec(t)),
			"rlimit RLIMIT_MEMLOCK (hard)", "the runtime's own hard limit")
	})
	t.Run("lower passes", func(t *testing.T) {
		if err := Check(editTC(t, setRlimit(unix.RLIMIT_NOFILE, 16, 64)), runcSpec(t)); err != nil {
			t.Fatal(err)
		}
	})
}
