package criu

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// zeroShmMiB is the size of each of the workload's three shared regions.
const zeroShmMiB = 256

// zeroShmProc is testdata/zeroshm.c running in an IPC namespace of its own
// (so that CRIU dumps its SysV segment).
type zeroShmProc struct {
	*harness.BareProc
	nonzero int64 // bytes of non-zero pages of the three regions
}

func startZeroShm(t *testing.T) *zeroShmProc {
	t.Helper()
	harness.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "zeroshm")
	harness.Run(t, time.Minute, nil, "gcc", "-O2", "-o", bin, filepath.Join("../testdata", "zeroshm.c"))
	p := &zeroShmProc{BareProc: harness.StartBare(t, nil, nil, "unshare --ipc "+bin+" "+strconv.Itoa(zeroShmMiB)+" ready </dev/null")}
	harness.WaitFor(t, time.Minute, "zeroshm to be ready", func() bool {
		b, _ := os.ReadFile(filepath.Join(p.Dir, "ready"))
		m := regexp.MustCompile(`nonzero_kib (\d+)`).FindSubmatch(b)
		if m == nil {
			return false
		}
		kib, _ := strconv.ParseInt(string(m[1]), 10, 64)
		p.nonzero = kib << 10
		return true
	})
	return p
}

// verify has the process count the pages of each region in memory and
// then check every byte; it returns the counts (shared, memfd, sysv).
func (p *zeroShmProc) verify(t *testing.T, after string) map[string]int64 {
	t.Helper()
	f := filepath.Join(p.Dir, "result")
	os.Remove(f)
	harness.WaitFor(t, time.Minute, "the process to check its memory after "+after, func() bool {
		_ = syscall.Kill(p.PID, syscall.SIGUSR1) // again: a signal may come before pause()
		b, _ := os.ReadFile(f)
		return strings.HasSuffix(string(b), "\n")
	})
	b, _ := os.ReadFile(f)
	m := regexp.MustCompile(`^ok shared (\d+) memfd (\d+) sysv (\d+)\n$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("after %s: %q", after, b)
	}
	res := map[string]int64{}
	for i, k := range []string{"shared", "memfd", "sysv"} {
		res[k], _ = strconv.ParseInt(string(m[i+1]), 10, 64)
	}
	return res
}

// wantHoles fails unless each region holds in memory about its non-zero
// pages only: the zero pages left out of the dump are holes after restore.
func (p *zeroShmProc) wantHoles(t *testing.T, after string, res map[string]int64) {
	t.Helper()
	perRegion := p.nonzero / 3 / 4096
	for k, n := range res {
		if n > perRegion+perRegion/10+16 {
			t.Errorf("after %s, %d pages of the %s region are in memory, want about its %d non-zero ones", after, n, k, perRegion)
		}
	}
}

func (p *zeroShmProc) end(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	harness.WaitFor(t, time.Minute, "the restored process to be reaped", func() bool { return !procfs.Exists(p.PID) })
}

// shmZeroPagesSkipped sums the dump log's "cryo: shmem ...: N zero pages
// not dumped" lines.
func shmZeroPagesSkipped(t *testing.T, img string) (pages int64, lines int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(img, "criu-dump.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`cryo: shmem 0x[0-9a-f]+: (\d+) zero pages not dumped`).FindAllSubmatch(b, -1) {
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		pages += n
		lines++
	}
	return pages, lines
}

// TestCRIUZeroShm: a process with 256 MiB each of shared anonymous memory,
// a memfd and a SysV segment, every page touched with zeros and some made
// non-zero (whole pages, and pages whose only non-zero byte is the first, a
// middle or the last one), is checkpointed with `cryo checkpoint --pid`:
// the pages images hold about the non-zero pages only. Restored by cryo's
// CRIU and by stock CRIU, the process finds every byte as it was, and the
// zero pages are holes (mincore: not in memory before it reads them). The
// image that `cryo image build` makes of it is as small, and it restores
// again after a push and pull through a registry on loopback.
func TestCRIUZeroShm(t *testing.T) {
	requireZeroPagesCRIU(t)
	if out, err := harness.RunErr(time.Minute, nil, harness.PatchedCRIU(t), "check", "--feature", "cryo_zero_shmem"); err != nil {
		t.Fatalf("%s lacks cryo's shared-memory zero-page patch (run `make deps`): %v\n%s", harness.PatchedCRIU(t), err, out)
	}
	p := startZeroShm(t)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WaitFor(t, time.Minute, "the dumped process to exit", func() bool { return !procfs.Exists(p.PID) })

	zeros := int64(3*zeroShmMiB<<20) - p.nonzero
	limit := p.nonzero + zeros/20 // at most 5 % of the zeros on top of the data
	size := pagesBytes(t, img)
	skipped, lines := shmZeroPagesSkipped(t, img)
	t.Logf("pages images %.1f MiB, non-zero pages %.1f MiB, %d zero pages of shared memory not dumped (%d objects)",
		float64(size)/(1<<20), float64(p.nonzero)/(1<<20), skipped, lines)
	if size > limit {
		t.Errorf("pages images hold %d bytes: want at most %d (the %d non-zero bytes and 5 %% of the zeros)", size, limit, p.nonzero)
	}
	if lines != 3 || skipped != zeros/4096 {
		t.Errorf("dump log: %d zero pages not dumped in %d lines, want %d in 3", skipped, lines, zeros/4096)
	}

	for _, c := range []struct{ what, criu string }{{"cryo restore", ""}, {"a restore by stock CRIU", harness.StockCRIU(t)}} {
		var env []string
		if c.criu != "" {
			env = []string{"CRYO_CRIU=" + c.criu}
		}
		if pid := harness.BareRestoredPID(t, env, img); pid != p.PID {
			t.Fatalf("%s: pid %d, want %d", c.what, pid, p.PID)
		}
		p.wantHoles(t, c.what, p.verify(t, c.what))
		p.end(t)
	}

	reg := harness.StartRegistry(t)
	a, b := harness.NewNode(t, nil), harness.NewNode(t, nil)
	ref := reg.Addr + "/ckpt/zeroshm:v1"
	a.Cryo(t, "image", "build", img, ref)
	if n := harness.DirBytes(t, a.Store); n > limit {
		t.Errorf("the image store holds %d bytes after `cryo image build`: want at most %d", n, limit)
	} else {
		t.Logf("image store after build: %.1f MiB", float64(n)/(1<<20))
	}
	a.Cryo(t, "image", "push", ref)
	b.Cryo(t, "image", "pull", ref)
	out := strings.TrimSpace(b.Cryo(t, "image", "restore", "--dir", filepath.Join(t.TempDir(), "work"), ref))
	if pid, _ := strconv.Atoi(out[strings.LastIndex(out, "\n")+1:]); pid != p.PID {
		t.Fatalf("image restore: pid %d, want %d:\n%s", pid, p.PID, out)
	}
	p.wantHoles(t, "cryo image restore", p.verify(t, "cryo image restore"))
	p.end(t)
}
