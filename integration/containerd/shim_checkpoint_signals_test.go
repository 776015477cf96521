package containerd

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// How a case reaches containerd: `ctr task checkpoint` into its content
// store, or with --image-path into a directory of the caller's.
const (
	viaStore = "store"
	viaPath  = "image-path"
)

// shimSigRig is one containerd for the whole sweep, whose shims are the
// failpoint build, held before the step a file names, and whose CRIU
// holds in its post-dump phase when a second file is there.
type shimSigRig struct {
	d        *harness.Daemon
	setting  string // CRYO_TEST_HOLD=@setting: "STEP:FILE"
	hold     string // the failpoint's hold file
	criuArm  string // present: the next dump holds in post-dump
	criuHeld string // created by the held CRIU's action script, removed to go on
}

func newShimSigRig(t *testing.T, v harness.CtrdVersion) *shimSigRig {
	dir := t.TempDir()
	r := &shimSigRig{setting: filepath.Join(dir, "hold-setting"), hold: filepath.Join(dir, "hold"),
		criuArm: filepath.Join(dir, "criu-arm"), criuHeld: filepath.Join(dir, "criu-held")}
	script := filepath.Join(dir, "criu-hold.sh")
	harness.WriteFile(t, script, "#!/bin/sh\n[ \"$CRTOOLS_SCRIPT_ACTION\" = post-dump ] && [ -e "+r.criuArm+" ] || exit 0\n"+
		"rm -f "+r.criuArm+"\n: > "+r.criuHeld+"\nn=0\nwhile [ -e "+r.criuHeld+" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "criu.conf")
	harness.WriteFile(t, conf, "action-script "+script+"\n")
	r.d = harness.NewDaemon(t, v, false)
	r.d.EnvExtra = []string{"PATH=" + filepath.Dir(harness.FailpointBin(t, "containerd-shim-cryo-v2")) + ":" + harness.BinDir() + ":" + r.d.Bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CRYO_TEST_HOLD=@" + r.setting, "CRIU_CONFIG_FILE=" + conf, "CRYO_DIGEST_WATCH=0"}
	r.d.Start()
	r.d.ImportTestImage()
	return r
}

// shimCase is one run: a fresh container, checkpointed by ctr through
// route, with the shim held before step ("" for no hold) or its CRIU in
// post-dump (midDump), then stopped by.
type shimCase struct {
	step    orchestrate.StepName
	by      harness.StopBy
	route   string
	midDump bool
	restore bool // restore the checkpoint the case kept, to prove it whole
	helper  bool // slow the driver's copy in containerd's pause, to find the shim's helper in it
}

func (c shimCase) name() string {
	at := string(c.step)
	if c.midDump {
		at = "criu-post-dump"
	}
	return at + "/" + c.by.String() + "-shim/" + c.route
}

// TestShimCheckpointSignalSweep: every step of the shim's checkpoint (read
// from the step runner's table as the shim runs it, after containerd's
// pause) with SIGTERM to the shim's group and SIGKILL of the shim alone;
// SIGINT, SIGHUP and SIGKILL of the group at some of them; and SIGTERM and
// SIGKILL of the group while the shim's CRIU holds the container in its
// post-dump phase, where the test also checks that CRIU, runc and the
// driver helper are in no group of the shim's. The routes alternate
// between containerd's content store and an image path; two cases run on
// containerd 1.7 too. About 50 s.
func TestShimCheckpointSignalSweep(t *testing.T) {
	start := time.Now()
	r := newShimSigRig(t, harness.CtrdVersions[1])
	steps := orchestrate.PausedCheckpointSteps(true)
	var cases []shimCase
	for i, step := range steps {
		route := []string{viaStore, viaPath}[i%2]
		cases = append(cases, shimCase{step: step, by: harness.ByTERM, route: route, restore: i == 0, helper: i == 0},
			shimCase{step: step, by: harness.ByKill, route: viaPath, restore: step == "final"})
	}
	cases = append(cases,
		shimCase{step: orchestrate.StepFind, by: harness.ByINT, route: viaStore},
		shimCase{step: orchestrate.StepInventory, by: harness.ByHUP, route: viaPath},
		shimCase{step: orchestrate.StepManifest, by: harness.ByKillGroup, route: viaStore},
		shimCase{step: orchestrate.StepDigests, by: harness.ByKillGroup, route: viaPath},
		shimCase{midDump: true, by: harness.ByTERM, route: viaPath},
		shimCase{midDump: true, by: harness.ByKillGroup, route: viaPath})
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) { r.run(t, c, steps) })
	}
	// containerd 1.7 runs the same shim and the same `delete`: a stop
	// after the dump's step and a kill after the dump, on both routes.
	old := newShimSigRig(t, harness.CtrdVersions[0])
	oldCases := []shimCase{{step: orchestrate.StepDump, by: harness.ByTERM, route: viaStore}, {step: orchestrate.StepDigests, by: harness.ByKill, route: viaPath}}
	for _, c := range oldCases {
		t.Run(harness.CtrdVersions[0].Name+"/"+c.name(), func(t *testing.T) { old.run(t, c, steps) })
	}
	t.Logf("%d cases in %s", len(cases)+len(oldCases), time.Since(start).Round(time.Second))
}

// run is one case of the sweep.
func (r *shimSigRig) run(t *testing.T, c shimCase, steps []orchestrate.StepName) {
	d := r.d.With(t)
	id := harness.UniqueID("cs")
	d.RunApp(id)
	t.Cleanup(func() { d.Remove(id) })
	pid := d.TaskPid(id)
	dir := ""
	args := []string{"--address", d.Socket, "--namespace", harness.TestNamespace, "task", "checkpoint"}
	if c.route == viaPath {
		dir = filepath.Join(t.TempDir(), "img")
		args = append(args, "--image-path", dir)
	}
	r.arm(t, c)
	if c.helper {
		harness.WriteFile(t, filepath.Join(d.Faults, "checkpoint."+strconv.Itoa(pid)), "delay 1500 once\n")
	}
	// ctr 1.7 passes --image-path only to runtimes named io.containerd.runc*.
	g := harness.StartGroupCryo(t, d.CtrWithOptions(), d.Env(), append(args, id)...)
	if c.helper {
		shim := d.ShimPid(id)
		notInShimGroup(t, shim, helperOf(t, shim))
	}
	var shim int
	if c.midDump {
		harness.WaitHold(t, r.criuHeld, "the shim's CRIU to reach post-dump")
		shim = d.ShimPid(id)
		notInShimGroup(t, shim, criuUnder(t, r.criuHeld))
	} else {
		harness.WaitHold(t, r.hold, "the shim to reach step "+string(c.step))
		shim = d.ShimPid(id)
	}
	if pg, _ := syscall.Getpgid(shim); pg != shim {
		t.Fatalf("the shim (pid %d) leads no group of its own (group %d)", shim, pg)
	}
	if c.by.Group {
		syscall.Kill(-shim, c.by.Sig)
	} else {
		syscall.Kill(shim, c.by.Sig)
	}
	if !c.by.Killed() {
		time.Sleep(200 * time.Millisecond) // the shim has the signal before the step goes on
	}
	os.Remove(r.hold)
	os.Remove(r.criuHeld)
	code := g.Wait(t)
	out := strings.TrimSpace(g.Out.String())
	t.Logf("ctr exited %d:\n%s", code, out)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("containerd's log:\n%s", harness.LastLines(d.Log(), 40))
		}
	})
	switch {
	case c.by.Sig == syscall.SIGHUP:
		r.ranOn(t, d, c, id, pid, shim, code, out, dir)
	case c.by.Killed():
		r.Killed(t, d, c, id, pid, shim, code, dir, steps)
	default:
		r.stoppedAfter(t, d, c, id, pid, shim, code, out, dir)
	}
}

// arm sets the case's hold: the failpoint before its step, or CRIU's
// post-dump phase.
func (r *shimSigRig) arm(t *testing.T, c shimCase) {
	t.Helper()
	os.Remove(r.hold)
	os.Remove(r.criuHeld)
	setting := "none:" + r.hold
	if c.midDump {
		harness.WriteFile(t, r.criuArm, "")
	} else {
		setting = string(c.step) + ":" + r.hold
	}
	if err := os.WriteFile(r.setting, []byte(setting), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(r.setting); os.Remove(r.hold); os.Remove(r.criuHeld); os.Remove(r.criuArm) })
}

// criuUnder is the held CRIU (the parent of its action script) and its
// parent, runc.
func criuUnder(t *testing.T, held string) []int {
	t.Helper()
	for _, pid := range harness.PidsOf("sh", filepath.Join(filepath.Dir(held), "criu-hold.sh")) {
		v, _ := procfs.StatusField(pid, "PPid")
		criu, _ := strconv.Atoi(v)
		if procfs.Comm(criu) != "criu" {
			continue
		}
		v, _ = procfs.StatusField(criu, "PPid")
		runc, _ := strconv.Atoi(v)
		return []int{criu, runc}
	}
	t.Fatal("no CRIU runs the hold script")
	return nil
}

// helperOf waits for the shim's driver helper (cryo-cuda-helper) and
// returns its pid.
func helperOf(t *testing.T, shim int) []int {
	t.Helper()
	var pids []int
	harness.WaitFor(t, 20*time.Second, "the shim's driver helper", func() bool {
		for _, pid := range procfs.Children(shim) {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.HasPrefix(string(b), "cryo-cuda-helper\x00") {
				pids = append(pids, pid)
			}
		}
		return len(pids) > 0
	})
	return pids
}

// notInShimGroup: a signal to the shim's group reaches none of pids.
func notInShimGroup(t *testing.T, shim int, pids []int) {
	t.Helper()
	for _, pid := range pids {
		pg, err := syscall.Getpgid(pid)
		if err != nil || pg == shim {
			t.Fatalf("pid %d (%s) is in the shim's group %d (%v)", pid, procfs.Comm(pid), shim, err)
		}
	}
}

// stoppedAfter: SIGTERM or SIGINT. The checkpoint completed and ctr says
// so; then the shim stopped, said why, and containerd ended the task.
func (r *shimSigRig) stoppedAfter(t *testing.T, d *harness.Daemon, c shimCase, id string, pid, shim, code int, out, dir string) {
	t.Helper()
	if code != 0 {
		t.Fatalf("ctr task checkpoint exited %d in case %s, want 0 (the checkpoint finished):\n%s", code, c.name(), out)
	}
	harness.WaitFor(t, 20*time.Second, "the signalled shim to stop", func() bool { return !procfs.Alive(shim) })
	taskGone(t, d, id, pid)
	wantLogged(t, d, id, "cryo: stopping once the checkpoint in flight has finished", "signal="+c.by.String())
	if c.route == viaPath {
		completeIn(t, dir)
		return
	}
	fields := strings.Fields(out)
	ref := fields[len(fields)-1]
	if m := d.CheckpointManifest(ref); m.Unfinished() {
		t.Fatalf("the checkpoint %s has no digests: not complete", ref)
	}
	if c.restore {
		before := harness.CtrdLastTick(t, d.LogPath(id))
		d.RestoreTask(ref, id+"-r")
		t.Cleanup(func() { d.Remove(id + "-r") })
		d.WaitTicks(id+"-r", 3)
		harness.AssertContinues(t, d.LogPath(id+"-r"), before)
	}
}

// ranOn: SIGHUP. The shim took no notice: the checkpoint completed and the
// task runs on, ticking with its memory intact and CUDA running.
func (r *shimSigRig) ranOn(t *testing.T, d *harness.Daemon, c shimCase, id string, pid, shim, code int, out, dir string) {
	t.Helper()
	if code != 0 || !procfs.Alive(shim) {
		t.Fatalf("after SIGHUP to the shim's group: ctr exited %d, shim alive %v:\n%s", code, procfs.Alive(shim), out)
	}
	completeIn(t, dir)
	d.AssertRunsOn(id)
	if st := procfs.State(pid); st == "T" || st == "t" {
		t.Fatalf("the workload is stopped (%s)", st)
	}
	harness.WaitFor(t, 10*time.Second, "CUDA running in the container", func() bool {
		pg, err := fakecuda.ReadPage(pid)
		return err == nil && pg.State == 0
	})
}

// killed: SIGKILL. ctr fails, containerd ends the task with none of its
// processes left, and the shim's `delete` names what it kept: a checkpoint
// whose dump completed, else a directory emptied and marked partial.
func (r *shimSigRig) Killed(t *testing.T, d *harness.Daemon, c shimCase, id string, pid, shim, code int, dir string, steps []orchestrate.StepName) {
	t.Helper()
	if code == 0 {
		t.Fatalf("ctr task checkpoint succeeded with its shim killed")
	}
	taskGone(t, d, id, pid)
	// `delete` has settled the directory once it says so.
	wantLogged(t, d, id, "cryo: the shim died during a checkpoint")
	if c.route == viaStore {
		wantLogged(t, d, id, "cryo: the shim died during a checkpoint", "containerd's own directory", "nothing is kept")
		return
	}
	m, err := manifest.Read(dir)
	done, _ := manifest.DumpCompleted(dir, m)
	afterDump := !c.midDump && slices.Index(steps, c.step) > slices.Index(steps, orchestrate.StepDump)
	if afterDump && !done {
		t.Fatalf("killed before %s, after the dump: the dump in %s is not complete (%v)", c.step, dir, err)
	}
	if done {
		if err != nil || !m.Unfinished() {
			t.Fatalf("the kept checkpoint in %s: manifest %v, unfinished %v; want one a restore completes", dir, err, m.Unfinished())
		}
		wantLogged(t, d, id, "cryo: the shim died during a checkpoint", "kept", dir)
		if c.restore {
			before := harness.CtrdLastTick(t, d.LogPath(id))
			d.RestoreFromPath(dir, id+"-r")
			t.Cleanup(func() { d.Remove(id + "-r") })
			harness.AssertContinues(t, d.LogPath(id+"-r"), before)
		}
		return
	}
	if p, err := manifest.ReadPartial(dir); err != nil || p == nil {
		t.Fatalf("killed before the dump completed: %s is not marked partial (%v)", dir, err)
	}
	if ok, _ := manifest.IsImageDir(dir); ok {
		t.Errorf("the partial checkpoint in %s still holds CRIU images", dir)
	}
	wantLogged(t, d, id, "cryo: the shim died during a checkpoint", "partial", dir)
}

// taskGone: containerd has no task of id any more, and its process is
// gone, not left running or stopped.
func taskGone(t *testing.T, d *harness.Daemon, id string, pid int) {
	t.Helper()
	harness.WaitFor(t, 20*time.Second, "containerd to end the task of "+id, func() bool { return !taskExists(d, id) })
	harness.WaitFor(t, 10*time.Second, "the workload (pid "+strconv.Itoa(pid)+") to be gone", func() bool { return !procfs.Alive(pid) })
}

// completeIn: the checkpoint in dir has its digests and every file it
// names.
func completeIn(t *testing.T, dir string) {
	t.Helper()
	if dir == "" {
		return
	}
	m, err := manifest.Read(dir)
	if err != nil || m.Unfinished() {
		t.Fatalf("the checkpoint in %s is not complete: %v", dir, err)
	}
	if ok, err := manifest.DumpCompleted(dir, m); !ok {
		t.Fatalf("the dump in %s did not complete: %v", dir, err)
	}
}

// wantLogged: a line of containerd's log names id and holds every want.
func wantLogged(t *testing.T, d *harness.Daemon, id string, wants ...string) {
	t.Helper()
	var found bool
	harness.WaitFor(t, 10*time.Second, fmt.Sprintf("containerd's log to say %q of %s", wants, id), func() bool {
		for _, line := range strings.Split(d.Log(), "\n") {
			if !strings.Contains(line, id) {
				continue
			}
			ok := true
			for _, w := range wants {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				found = true
				t.Logf("containerd's log: %s", line)
				return true
			}
		}
		return false
	})
	_ = found
}
