package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// The concurrency cases: two checkpoints of one target at once. Exactly one
// may run; the other must fail at once, naming the holder, without
// touching the processes, and the workload's device memory must stay
// intact. A fault file slows the winner's driver lock so that the two runs
// overlap every round; the loser never reaches the driver.

const concurrentRounds = 20

// raceResult is one command of a pair.
type raceResult struct {
	out  string
	err  error
	took time.Duration
}

// race runs two commands at once and returns both results.
func race(env []string, a, b []string) [2]raceResult {
	var res [2]raceResult
	var wg sync.WaitGroup
	for i, args := range [][]string{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			out, err := runErr(bareTimeout, env, args[0], args[1:]...)
			res[i] = raceResult{out: out, err: err, took: time.Since(start)}
		}()
	}
	wg.Wait()
	return res
}

// oneWins checks that exactly one of a pair succeeded and that the other
// failed fast naming the lock holder; it returns the winner's index.
func oneWins(t testing.TB, round int, res [2]raceResult, holder string) int {
	t.Helper()
	if (res[0].err == nil) == (res[1].err == nil) {
		t.Fatalf("round %d: want exactly one success:\nA (%v): %s\nB (%v): %s", round, res[0].err, res[0].out, res[1].err, res[1].out)
	}
	win := 0
	if res[0].err != nil {
		win = 1
	}
	lose := res[1-win]
	// Through containerd, a second request whose Pause comes while the
	// first request's own Pause holds the task, before the shim has begun
	// the first checkpoint, is refused by containerd itself: as fast, and
	// before anything is touched. One whose Pause comes while the first
	// one's GPU-free pause runs is refused by that pause's lock.
	switch {
	case strings.Contains(lose.out, "cannot pause a paused container"):
	case strings.Contains(lose.out, "a pause of "+holder):
		wantIn(t, lose.out, "a pause of "+holder+" is in progress (pid ", " of cryo)")
	case strings.Contains(lose.out, "a resume of "+holder):
		// The winner's checkpoint is done and containerd's resume of the
		// task (which gives the GPU back) holds the lock.
		wantIn(t, lose.out, "a resume of "+holder+" is in progress (pid ", " of cryo)")
	default:
		wantIn(t, lose.out, "a checkpoint of "+holder+" is in progress (pid ", " of cryo)")
	}
	if lose.took > res[win].took {
		t.Fatalf("round %d: the refused run took %s, longer than the one that ran (%s): it waited instead of failing fast", round, lose.took, res[win].took)
	}
	return win
}

// slowLock arms the fake driver's lock of pid with a delay.
func slowLock(t testing.TB, faults string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(faults, "lock."+strconv.Itoa(pid)), []byte("delay 300"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Two `cryo checkpoint --pid P --leave-running` at once.
func TestConcurrentBareCheckpoint(t *testing.T) {
	requireRoot(t)
	faults := t.TempDir()
	env := fakeDriverEnv(t, faults)
	p := bareStartFakeApp(t, env, nil)
	slowLock(t, faults, p.pid)
	pid := strconv.Itoa(p.pid)
	cryo := cryoBin(t, "cryo")
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
		win := oneWins(t, r, race(env, ckpt(imgs[0], leave), ckpt(imgs[1], leave)), "pid "+pid)
		if _, err := manifest.Read(imgs[1-win]); err == nil {
			t.Fatalf("round %d: the refused run wrote a manifest", r)
		}
		if !leave {
			bareRestoresIntact(t, env, p, imgs[win])
			break
		}
		wantIn(t, bareCryo(t, env, "cuda", "state", pid), "running")
		p.waitTicks(t, p.lastTick(t)+2) // fails on sum=BAD
	}
	bareTicksIncrease(t, p.output())
}

// bareRestoresIntact restores img, the checkpoint of p that ended it, and
// checks that the app counts on with its memory intact.
func bareRestoresIntact(t *testing.T, env []string, p *bareProc, img string) {
	t.Helper()
	waitFor(t, 10*time.Second, "the dumped process to be reaped", func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(p.pid))
		return os.IsNotExist(err)
	})
	before := p.lastTick(t)
	if got := bareRestoredPID(t, env, img); got != p.pid {
		t.Fatalf("restored pid %d, want %d", got, p.pid)
	}
	p.waitTicks(t, before+3)
}

// Two `cryo-runc checkpoint --leave-running` of one container at once, and
// `cryo cuda suspend` of the container's process racing cryo-runc: the two
// front ends share the lock on the pid.
func TestConcurrentRuncwrapCheckpoint(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	faults := filepath.Join(dir, "faults")
	os.Mkdir(faults, 0o755)
	bundle := rwBundle(t, filepath.Join(dir, "bundle"))
	envFile := filepath.Join(dir, "cryo-runc.env")
	lines := append([]string{"CRYO_RUNC=/usr/sbin/runc"}, fakeDriverEnv(t, faults)...)
	os.WriteFile(envFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	root := filepath.Join(dir, "runc-root")
	id := "cryo-race-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id) })
	wrap := cryoBin(t, "cryo-runc")

	out := rwRunDetached(t, nil, wrap, "--cryo-env", envFile, "--root", root, "run", "-d", "--bundle", bundle, id)
	waitFor(t, 20*time.Second, "the app to tick", func() bool { return rwLastTick(out.String()) >= 3 })
	pid := rwInitPID(t, root, id)
	slowLock(t, faults, pid)
	ckpt := func(img string) []string {
		return []string{wrap, "--cryo-env", envFile, "--root", root, "checkpoint", "--leave-running",
			"--image-path", img, "--work-path", img + ".work", id}
	}
	var good string
	for r := 0; r < concurrentRounds; r++ {
		imgs := [2]string{filepath.Join(dir, "a"+strconv.Itoa(r)), filepath.Join(dir, "b"+strconv.Itoa(r))}
		res := race(nil, ckpt(imgs[0]), ckpt(imgs[1]))
		win := oneWins(t, r, res, "container "+id)
		good = imgs[win]
		rwTicksOn(t, out)
	}
	// Across front ends: `cryo cuda suspend` of the container's process
	// races cryo-runc; they share the lock on the pid.
	res := race(fakeDriverEnv(t, faults), ckpt(filepath.Join(dir, "x")),
		[]string{cryoBin(t, "cryo"), "cuda", "suspend", strconv.Itoa(pid)})
	if res[0].err != nil {
		// cryo-runc lost the race: the suspend holds the pid. Give the
		// process its GPU back.
		wantIn(t, res[0].out, "in progress")
		run(t, time.Minute, fakeDriverEnv(t, faults), cryoBin(t, "cryo"), "cuda", "resume", strconv.Itoa(pid))
	} else {
		wantIn(t, res[1].out, "in progress")
	}
	rwTicksOn(t, out)
	// The bare checkpoint refuses a container's process outright, before
	// any lock: it is the container runtime's to checkpoint.
	refused, err := runErr(time.Minute, fakeDriverEnv(t, faults), cryoBin(t, "cryo"), "checkpoint", "--pid", strconv.Itoa(pid), "--dir", filepath.Join(dir, "y"))
	if exitCode(err) != 2 {
		t.Fatalf("cryo checkpoint of a container's process: exit %d, want 2:\n%s", exitCode(err), refused)
	}
	wantIn(t, refused, "is in a container", "cryo-runc")
	rwTicksOn(t, out)

	// The last winner's image restores intact.
	before := rwLastTick(out.String())
	run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id)
	out2 := rwRunDetached(t, nil, wrap, "--cryo-env", envFile, "--root", root, "restore", "-d",
		"--image-path", good, "--work-path", filepath.Join(dir, "rw"), "--bundle", bundle, id)
	waitFor(t, 20*time.Second, "the restored app to tick on", func() bool { return rwLastTick(out2.String()) > before+2 })
	if strings.Contains(out2.String(), "sum=BAD") {
		t.Fatalf("restored app lost its device memory: %s", out2)
	}
}

// rwTicksOn waits for two more good ticks and fails on a corrupted one.
func rwTicksOn(t *testing.T, out *testsupport.Buffer) {
	t.Helper()
	n := rwLastTick(out.String())
	waitFor(t, 20*time.Second, "the app to tick on", func() bool { return rwLastTick(out.String()) >= n+2 })
	if strings.Contains(out.String(), "sum=BAD") {
		t.Fatalf("the app lost its device memory:\n%s", out)
	}
}

func rwInitPID(t *testing.T, root, id string) int {
	t.Helper()
	st := run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", root, "state", id)
	i := strings.Index(st, `"pid":`)
	if i < 0 {
		t.Fatalf("runc state: %s", st)
	}
	n, _ := strconv.Atoi(strings.Trim(strings.Fields(st[i+6:])[0], ", "))
	return n
}

// concurrentShimRounds is smaller than concurrentRounds: each round is two
// `ctr task checkpoint`, which names its image by the second.
const concurrentShimRounds = 5

// testConcurrentTaskCheckpoints: two `ctr task checkpoint` of one task at
// once. containerd pauses the task before each request; the shim refuses
// the second Pause while the first checkpoint runs, so the first one's
// driver calls never meet a frozen cgroup, and the second request fails at
// once naming the first.
func testConcurrentTaskCheckpoints(d *daemon) {
	d.runApp("cc")
	pid := d.task("cc").Pid()
	slowLock(d.t, d.faults, int(pid))
	ctr := filepath.Join(d.bin, "ctr")
	args := []string{"--address", d.socket, "--namespace", testNamespace, "task", "checkpoint", "cc"}
	var ref string
	var refBefore int // the last tick before the winning checkpoint of ref
	for r := 0; r < concurrentShimRounds; r++ {
		time.Sleep(1100 * time.Millisecond) // a fresh image name
		before := ctrdLastTick(d.t, d.logPath("cc"))
		res := race(d.env(), append([]string{ctr}, args...), append([]string{ctr}, args...))
		win := oneWins(d.t, r, res, "container cc")
		lines := strings.Fields(strings.TrimSpace(res[win].out))
		ref, refBefore = lines[len(lines)-1], before
		d.assertRunsOn("cc")
		if ctrdLastTick(d.t, d.logPath("cc")) <= before {
			d.t.Fatalf("round %d: the app did not tick on", r)
		}
	}
	os.Remove(filepath.Join(d.faults, "lock."+strconv.Itoa(int(pid))))
	d.restoreTask(ref, "cc-clone")
	d.waitTicks("cc-clone", 3)
	assertContinues(d.t, d.logPath("cc-clone"), refBefore)
	d.remove("cc-clone")
	d.remove("cc")
}
