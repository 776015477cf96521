package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// The concurrency cases: two checkpoints of one target at once. Exactly one
// may run; the other must fail at once, naming the holder, without
// touching the processes, and the workload's device memory must stay
// intact. A fault file slows the winner's driver lock so that the two runs
// overlap every round; the loser never reaches the driver.

const concurrentRounds = 20

// Two `cryo checkpoint --pid P --leave-running` at once.
func TestConcurrentBareCheckpoint(t *testing.T) {
	harness.RequireRoot(t)
	faults := t.TempDir()
	env := harness.FakeDriverEnv(t, faults)
	p := harness.BareStartFakeApp(t, env, nil)
	harness.SlowLock(t, faults, p.PID)
	pid := strconv.Itoa(p.PID)
	cryo := harness.CryoBin(t, "cryo")
	dir := t.TempDir()
	ckpt := func(img string, leave bool) []string {
		args := []string{cryo, "checkpoint", "--pid", pid, "--dir", img}
		if leave {
			args = append(args, "--leave-running")
		}
		return args
	}
	for r := 0; r <= concurrentRounds; r++ {
		imgs := [2]string{filepath.Join(dir, "a"+strconv.Itoa(r)), filepath.Join(dir, "b"+strconv.Itoa(r))}
		// The last round dumps and ends the process, so that its image
		// can be restored (CRIU checks the size of the app's output file).
		leave := r < concurrentRounds
		win := harness.OneWins(t, r, harness.Race(env, ckpt(imgs[0], leave), ckpt(imgs[1], leave)), "pid "+pid)
		if _, err := manifest.Read(imgs[1-win]); err == nil {
			t.Fatalf("round %d: the refused run wrote a manifest", r)
		}
		if !leave {
			bareRestoresIntact(t, env, p, imgs[win])
			break
		}
		harness.WantIn(t, harness.BareCryo(t, env, "cuda", "state", pid), "running")
		p.WaitTicks(t, p.LastTick(t)+2) // fails on sum=BAD
	}
	bareTicksIncrease(t, p.Output())
}

// bareRestoresIntact restores img, the checkpoint of p that ended it, and
// checks that the app counts on with its memory intact.
func bareRestoresIntact(t *testing.T, env []string, p *harness.BareProc, img string) {
	t.Helper()
	harness.WaitFor(t, 10*time.Second, "the dumped process to be reaped", func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(p.PID))
		return os.IsNotExist(err)
	})
	before := p.LastTick(t)
	if got := harness.BareRestoredPID(t, env, img); got != p.PID {
		t.Fatalf("restored pid %d, want %d", got, p.PID)
	}
	p.WaitTicks(t, before+3)
}

// Two `cryo-runc checkpoint --leave-running` of one container at once, and
// `cryo cuda suspend` of the container's process racing cryo-runc: the two
// front ends share the lock on the pid.
func TestConcurrentRuncwrapCheckpoint(t *testing.T) {
	harness.RequireRoot(t)
	dir := t.TempDir()
	faults := filepath.Join(dir, "faults")
	os.Mkdir(faults, 0o755)
	bundle := harness.RwBundle(t, filepath.Join(dir, "bundle"))
	envFile := filepath.Join(dir, "cryo-runc.env")
	lines := append([]string{"CRYO_RUNC=/usr/sbin/runc"}, harness.FakeDriverEnv(t, faults)...)
	os.WriteFile(envFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	root := filepath.Join(dir, "runc-root")
	id := "cryo-race-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id) })
	wrap := harness.CryoBin(t, "cryo-runc")

	out := harness.RwRunDetached(t, nil, wrap, "--cryo-env", envFile, "--root", root, "run", "-d", "--bundle", bundle, id)
	harness.WaitFor(t, 20*time.Second, "the app to tick", func() bool { return harness.RwLastTick(out.String()) >= 3 })
	pid := harness.RwInitPID(t, root, id)
	harness.SlowLock(t, faults, pid)
	ckpt := func(img string) []string {
		return []string{wrap, "--cryo-env", envFile, "--root", root, "checkpoint", "--leave-running",
			"--image-path", img, "--work-path", img + ".work", id}
	}
	var good string
	for r := 0; r < concurrentRounds; r++ {
		imgs := [2]string{filepath.Join(dir, "a"+strconv.Itoa(r)), filepath.Join(dir, "b"+strconv.Itoa(r))}
		res := harness.Race(nil, ckpt(imgs[0]), ckpt(imgs[1]))
		win := harness.OneWins(t, r, res, "container "+id)
		good = imgs[win]
		rwTicksOn(t, out)
	}
	// Across front ends: `cryo cuda suspend` of the container's process
	// races cryo-runc; they share the lock on the pid.
	res := harness.Race(harness.FakeDriverEnv(t, faults), ckpt(filepath.Join(dir, "x")),
		[]string{harness.CryoBin(t, "cryo"), "cuda", "suspend", strconv.Itoa(pid)})
	if res[0].Err != nil {
		// cryo-runc lost the race: the suspend holds the pid. Give the
		// process its GPU back.
		harness.WantIn(t, res[0].Out, "in progress")
		harness.Run(t, time.Minute, harness.FakeDriverEnv(t, faults), harness.CryoBin(t, "cryo"), "cuda", "resume", strconv.Itoa(pid))
	} else {
		harness.WantIn(t, res[1].Out, "in progress")
	}
	rwTicksOn(t, out)
	// The bare checkpoint refuses a container's process outright, before
	// any lock: it is the container runtime's to checkpoint.
	refused, err := harness.RunErr(time.Minute, harness.FakeDriverEnv(t, faults), harness.CryoBin(t, "cryo"), "checkpoint", "--pid", strconv.Itoa(pid), "--dir", filepath.Join(dir, "y"))
	if harness.ExitCode(err) != 2 {
		t.Fatalf("cryo checkpoint of a container's process: exit %d, want 2:\n%s", harness.ExitCode(err), refused)
	}
	harness.WantIn(t, refused, "is in a container", "cryo-runc")
	rwTicksOn(t, out)

	// The last winner's image restores intact.
	before := harness.RwLastTick(out.String())
	harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id)
	out2 := harness.RwRunDetached(t, nil, wrap, "--cryo-env", envFile, "--root", root, "restore", "-d",
		"--image-path", good, "--work-path", filepath.Join(dir, "rw"), "--bundle", bundle, id)
	harness.WaitFor(t, 20*time.Second, "the restored app to tick on", func() bool { return harness.RwLastTick(out2.String()) > before+2 })
	if strings.Contains(out2.String(), "sum=BAD") {
		t.Fatalf("restored app lost its device memory: %s", out2)
	}
}

// rwTicksOn waits for two more good ticks and fails on a corrupted one.
func rwTicksOn(t *testing.T, out *testsupport.Buffer) {
	t.Helper()
	n := harness.RwLastTick(out.String())
	harness.WaitFor(t, 20*time.Second, "the app to tick on", func() bool { return harness.RwLastTick(out.String()) >= n+2 })
	if strings.Contains(out.String(), "sum=BAD") {
		t.Fatalf("the app lost its device memory:\n%s", out)
	}
}
