package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// faultyCRIU is the CRIU that every front end runs (CRYO_CRIU): a script
// named criu that passes every call to the real CRIU, except, once its mode
// says so, a restore. runc calls CRIU twice for a restore: a version
// query, which passes, then the restore, which hangs (never answers) or
// crashes: the script, which its caller knows as CRIU, starts the real
// CRIU's restore and dies of SIGSEGV, while the real CRIU, an orphan now,
// goes on with whatever it had begun.
type faultyCRIU struct {
	dir  string // holds the script, its mode and its helpers
	path string
}

func newFaultyCRIU(t *testing.T) faultyCRIU {
	t.Helper()
	real := harness.PatchedCRIU(t)
	dir, err := os.MkdirTemp("", "cryo-faulty-criu-")
	if err != nil {
		t.Fatal(err)
	}
	c := faultyCRIU{dir: dir, path: filepath.Join(dir, "criu")}
	// The hang is a process whose name is in dir, so that the test can
	// tell it was killed.
	if err := os.Symlink("/bin/sleep", filepath.Join(dir, "hang")); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
real=%[1]q
dir=%[2]q
mode=$(cat "$dir/mode" 2>/dev/null)
case "$mode" in hang|crash) ;; *) exec "$real" "$@" ;; esac
case "$(tr '\0' ' ' </proc/$PPID/cmdline)" in *" restore "*) ;; *) exec "$real" "$@" ;; esac
if [ "$(cat /proc/$PPID/comm)" = runc ] && [ ! -e "$dir/seen-$PPID" ]; then
	: >"$dir/seen-$PPID"
	exec "$real" "$@"
fi
echo "$mode $$" >>"$dir/faults"
[ "$mode" = hang ] && exec "$dir/hang" 86400
# runc moves its CRIU into the container's cgroups: wait for that before
# CRIU starts, as a CRIU of runc's would be there.
i=0
while [ "$(cat /proc/$PPID/comm)" = runc ] && [ $i -lt 500 ] && cmp -s /proc/$$/cgroup /proc/$PPID/cgroup; do
	sleep 0.01
	i=$((i+1))
done
"$real" "$@" &
criu=$!
# CRIU opens its log once it has the restore request.
i=0
while [ $i -lt 500 ] && ! ls -l /proc/$criu/fd 2>/dev/null | grep -q 'restore\.log'; do
	sleep 0.01
	i=$((i+1))
done
kill -SEGV $$
`, real, dir)
	if err := os.WriteFile(c.path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killUnder(dir)
		_ = os.RemoveAll(dir)
	})
	return c
}

// set makes the next restores hang, crash, or ("") pass.
func (c faultyCRIU) Set(t testing.TB, mode string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, "mode"), []byte(mode), 0o644); err != nil {
		t.Fatal(err)
	}
}

// faults is how many restores the script failed.
func (c faultyCRIU) faults() int {
	b, _ := os.ReadFile(filepath.Join(c.dir, "faults"))
	return strings.Count(string(b), "\n")
}

// TestRestoreDeadline: a hanging and a crashing CRIU under containerd 1.7
// and 2.x (a client restore of a task checkpoint, as ctr does) and under
// containerd 2.x's CRI (StartContainer of containerd's own CRI restore, as
// the kubelet calls it).
func TestRestoreDeadline(t *testing.T) {
	harness.RequireRoot(t)
	t.Cleanup(removeNamespaceDirs) // last: after the daemons' own clean-up
	criu := newFaultyCRIU(t)
	// The shims inherit containerd's environment, and containerd the test's.
	t.Setenv(config.EnvCRIU, criu.path)
	t.Setenv(config.EnvRestoreTimeout, harness.RestoreDeadline.String())
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) { testClientRestoreDeadline(t, v, criu) })
	}
	t.Run("CRI", func(t *testing.T) { testCRIRestoreDeadline(t, criu) })
	t.Run("cryo-runc", func(t *testing.T) { testRuncwrapRestoreDeadline(t, criu) })
	t.Run("bare", func(t *testing.T) { testBareRestoreDeadline(t, criu) })
}

func testClientRestoreDeadline(t *testing.T, v harness.CtrdVersion, criu faultyCRIU) {
	d := harness.StartDaemon(t, v)
	d.ImportTestImage()
	criu.Set(t, "")
	d.RunApp("dl")
	ref, _ := d.TaskCheckpoint("dl")
	d.Remove("dl")
	for _, mode := range []string{"hang", "crash"} {
		t.Run(mode, func(t *testing.T) {
			d := d.With(t)
			id := "dl-" + mode
			t.Cleanup(func() { scrubContainer(id) })
			criu.Set(t, mode)
			faults := criu.faults()
			took, err := d.FailedRestore(ref, id)
			if criu.faults() == faults {
				t.Fatalf("CRIU was not made to %s: the test did not run its attack", mode)
			}
			assertDeadlineError(t, mode, err, took)
			d.DeleteFailed(id)
			assertNothingLeft(t, id, criu)
		})
	}
}

func testCRIRestoreDeadline(t *testing.T, criu faultyCRIU) {
	// containerd's CRI restore finds the checkpoint's base image by its
	// repository digest: the app comes from a registry, as on a real node.
	reg := harness.StartRegistry(t)
	n := harness.StartCRINode(t)
	criu.Set(t, "")
	app := reg.Addr + "/cryo/app:deadline"
	n.PublishApp(app)
	src := n.RunPodOf("dl-source", harness.CRIHandler, app)
	archive := filepath.Join(n.Dir, "checkpoint-dl.tar")
	src.Checkpoint(archive)
	src.Remove()
	for _, mode := range []string{"hang", "crash"} {
		t.Run(mode, func(t *testing.T) {
			n := n.With(t)
			criu.Set(t, mode)
			faults := criu.faults()
			p := n.NewPod("dl-"+mode, harness.CRIHandler, nil)
			if err := p.Create(archive); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { scrubContainer(p.Container) })
			took, err := p.FailedStart()
			if criu.faults() == faults {
				t.Fatalf("CRIU was not made to %s: the test did not run its attack", mode)
			}
			assertDeadlineError(t, mode, err, took)
			ctx, cancel := n.Ctx()
			defer cancel()
			if _, err := n.Rt.RemoveContainer(ctx, &criapi.RemoveContainerRequest{ContainerId: p.Container}); err != nil {
				t.Fatalf("RemoveContainer after the failed restore: %v\n%s", err, harness.LastLines(n.Log(), 30))
			}
			p.Remove()
			assertNothingLeft(t, p.Container, criu)
		})
	}
}

// testRuncwrapRestoreDeadline: Podman's restore (`restore --detach`)
// through cryo-runc, then Podman's `delete --force` of the container.
func testRuncwrapRestoreDeadline(t *testing.T, criu faultyCRIU) {
	dir := t.TempDir()
	bundle := harness.RwBundle(t, filepath.Join(dir, "bundle"))
	envFile := filepath.Join(dir, "cryo-runc.env")
	lines := append([]string{"CRYO_RUNC=/usr/sbin/runc"}, harness.FakeDriverEnv(t, "")...)
	if err := os.WriteFile(envFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "runc-root")
	runcw := []string{"--cryo-env", envFile, "--root", root}
	criu.Set(t, "")
	src := "cryo-dl-src-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		_, _ = harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", src)
	})
	out := harness.RwRunDetached(t, nil, harness.CryoBin(t, "cryo-runc"), append(runcw, "run", "-d", "--bundle", bundle, src)...)
	harness.WaitFor(t, 20*time.Second, "the app to tick", func() bool { return harness.RwLastTick(out.String()) >= 3 })
	img := filepath.Join(dir, "img")
	harness.Run(t, time.Minute, nil, harness.CryoBin(t, "cryo-runc"), append(runcw, "checkpoint", "--image-path", img, "--work-path", filepath.Join(dir, "w"), src)...)
	for _, mode := range []string{"hang", "crash"} {
		t.Run(mode, func(t *testing.T) {
			id := "cryo-dl-" + mode + "-" + strconv.Itoa(os.Getpid())
			t.Cleanup(func() { scrubContainer(id) })
			criu.Set(t, mode)
			faults := criu.faults()
			start := time.Now()
			msg, err := harness.RunErr(harness.RestoreDeadline+2*harness.DeadlineMargin, nil, harness.CryoBin(t, "cryo-runc"), append(runcw,
				"restore", "--detach", "--image-path", img, "--work-path", filepath.Join(dir, "w-"+mode), "--bundle", bundle, id)...)
			took := time.Since(start)
			if err == nil {
				t.Fatalf("restore with a faulty CRIU succeeded:\n%s", msg)
			}
			if criu.faults() == faults {
				t.Fatalf("CRIU was not made to %s: the test did not run its attack", mode)
			}
			assertDeadlineError(t, mode, errors.New(msg), took)
			if del, err := harness.RunErr(time.Minute, nil, harness.CryoBin(t, "cryo-runc"), append(runcw, "delete", "--force", id)...); err != nil {
				t.Errorf("delete --force after the failed restore: %v\n%s", err, del)
			}
			if _, err := os.Stat(filepath.Join(root, id)); err == nil {
				t.Errorf("runc's state %s is left", filepath.Join(root, id))
			}
			assertNothingLeft(t, id, criu)
		})
	}
	t.Run("busy-id", func(t *testing.T) { testRuncwrapBusyID(t, criu, runcw, bundle, img) })
}

// testRuncwrapBusyID: a restore into the id of a running container fails
// (runc refuses it), and the failed restore's clean-up must not take that
// container down with it.
func testRuncwrapBusyID(t *testing.T, criu faultyCRIU, runcw []string, bundle, img string) {
	criu.Set(t, "crash")
	id := "cryo-dl-busy-" + strconv.Itoa(os.Getpid())
	root := runcw[len(runcw)-1]
	t.Cleanup(func() {
		_, _ = harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id)
	})
	out := harness.RwRunDetached(t, nil, harness.CryoBin(t, "cryo-runc"), append(runcw, "run", "-d", "--bundle", bundle, id)...)
	harness.WaitFor(t, 20*time.Second, "the app to tick", func() bool { return harness.RwLastTick(out.String()) >= 3 })
	msg, err := harness.RunErr(harness.RestoreDeadline+2*harness.DeadlineMargin, nil, harness.CryoBin(t, "cryo-runc"), append(runcw,
		"restore", "--detach", "--image-path", img, "--work-path", filepath.Join(t.TempDir(), "w"), "--bundle", bundle, id)...)
	if err == nil {
		t.Fatalf("restore into the id of a running container succeeded:\n%s", msg)
	}
	before := harness.RwLastTick(out.String())
	harness.WaitFor(t, 10*time.Second, "the running container to tick on", func() bool { return harness.RwLastTick(out.String()) >= before+3 })
	if st, err := harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "state", id); err != nil || !strings.Contains(st, `"running"`) {
		t.Fatalf("the container whose id the restore named: %v\n%s", err, st)
	}
}

// testBareRestoreDeadline: `cryo restore --dir` of a bare process tree,
// which runs CRIU itself.
func testBareRestoreDeadline(t *testing.T, criu faultyCRIU) {
	env := harness.FakeDriverEnv(t, "")
	criu.Set(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WaitFor(t, 10*time.Second, "the dumped process to exit", func() bool { return !p.Alive() })
	for _, mode := range []string{"hang", "crash"} {
		t.Run(mode, func(t *testing.T) {
			criu.Set(t, mode)
			faults := criu.faults()
			start := time.Now()
			out, err := harness.RunErr(harness.RestoreDeadline+2*harness.DeadlineMargin, env, harness.CryoBin(t, "cryo"), "restore", "--dir", img)
			took := time.Since(start)
			if err == nil {
				t.Fatalf("cryo restore with a faulty CRIU succeeded:\n%s", out)
			}
			if criu.faults() == faults {
				t.Fatalf("CRIU was not made to %s: the test did not run its attack", mode)
			}
			assertFailure(t, mode, errors.New(out), took, "nothing of it is left running")
			harness.WaitFor(t, 3*time.Second, "the restored pid to be gone", func() bool {
				_, err := os.Stat(fmt.Sprintf("/proc/%d", p.PID))
				return err != nil
			})
			if left := pidsUnder(criu.dir); len(left) > 0 {
				t.Errorf("CRIU processes left: %v", left)
			}
		})
	}
}

// assertDeadlineError checks a failed restore's error: it came within the
// deadline and the margin, and names the restore step, what became of the
// container, and a remedy; a hang names the deadline's variable.
func assertDeadlineError(t *testing.T, mode string, err error, took time.Duration) {
	t.Helper()
	assertFailure(t, mode, err, took, "the container was removed")
}

// assertFailure is assertDeadlineError with the outcome the error must
// state.
func assertFailure(t *testing.T, mode string, err error, took time.Duration, outcome string) {
	t.Helper()
	t.Logf("%s: failed after %s: %v", mode, took.Round(time.Millisecond), err)
	if took > harness.RestoreDeadline+harness.DeadlineMargin {
		t.Errorf("%s: the restore failed after %s, want at most %s (deadline %s)", mode, took.Round(time.Millisecond), harness.RestoreDeadline+harness.DeadlineMargin, harness.RestoreDeadline)
	}
	msg := err.Error()
	// The restore step is CRIU's: a restore that fails there says "criu"
	// (CRIU's own log line, or runc's "criu failed"), or, cut off, that
	// CRIU did not finish.
	if !strings.Contains(strings.ToLower(msg), "criu") {
		t.Errorf("%s: the error does not name CRIU's step: %s", mode, msg)
	}
	for _, want := range []string{"nothing was restored", outcome, "remedy:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: the error lacks %q: %s", mode, want, msg)
		}
	}
	if mode == "hang" && !strings.Contains(msg, config.EnvRestoreTimeout) {
		t.Errorf("hang: the error does not name %s: %s", config.EnvRestoreTimeout, msg)
	}
}

// assertNothingLeft checks that nothing of container id stays on the host
// after its failed restore and its removal.
func assertNothingLeft(t *testing.T, id string, criu faultyCRIU) {
	t.Helper()
	// A moment for the kernel to finish killed processes off.
	var left []string
	deadline := time.Now().Add(3 * time.Second)
	for {
		left = restoreLeftovers(id, criu.dir)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, l := range left {
		t.Errorf("left behind by the failed restore of %s: %s", id, l)
	}
}

// restoreLeftovers lists what of container id is still on the host: mount
// points (the rootfs overlay, runc's criu-root bind mount), runc state
// directories, cgroup directories (in every hierarchy), processes in its
// cgroups, and processes of the faulty CRIU.
func restoreLeftovers(id, criuDir string) []string {
	var left []string
	for _, m := range mountsNamed(id) {
		left = append(left, "mount "+m)
	}
	states, _ := filepath.Glob(filepath.Join("/run/containerd/runc/*", id))
	for _, s := range states {
		left = append(left, "runc state "+s)
	}
	for _, cg := range cgroupDirsNamed(id) {
		left = append(left, "cgroup "+cg)
	}
	for _, pid := range pidsWhere(func(pid int) bool { return inCgroupNamed(pid, id) }) {
		left = append(left, fmt.Sprintf("process %d (%s) in its cgroup", pid, cmdline(pid)))
	}
	for _, pid := range pidsUnder(criuDir) {
		left = append(left, fmt.Sprintf("CRIU process %d (%s)", pid, cmdline(pid)))
	}
	return left
}

// mountsNamed lists the mount points with a path element id.
func mountsNamed(id string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && hasElement(f[4], id) {
			points = append(points, f[4])
		}
	}
	return points
}

func hasElement(path, name string) bool {
	for _, e := range strings.Split(path, "/") {
		if e == name {
			return true
		}
	}
	return false
}

// cgroupDirsNamed lists the cgroup directories named id, in every
// hierarchy (cgroup v1 has one per controller).
func cgroupDirsNamed(id string) []string {
	var dirs []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return nil
		}
		if e.Name() == id {
			dirs = append(dirs, p)
			return filepath.SkipDir
		}
		return nil
	})
	return dirs
}

func inCgroupNamed(pid int, id string) bool {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if _, path, ok := strings.Cut(line, ":"); ok {
			if _, path, ok = strings.Cut(path, ":"); ok && hasElement(path, id) {
				return true
			}
		}
	}
	return false
}

// pidsUnder lists the processes whose command's first word lies in dir.
func pidsUnder(dir string) []int {
	return pidsWhere(func(pid int) bool { return strings.HasPrefix(cmdline(pid), dir+"/") })
}

func pidsWhere(match func(int) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && pid != os.Getpid() && match(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// killUnder kills the processes of the faulty CRIU, for a test that failed
// before its restore's clean-up did.
func killUnder(dir string) {
	for _, pid := range pidsUnder(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// removeNamespaceDirs removes the test namespace's runc state directory
// and cgroups once they are empty: the shims make them, and leave them.
func removeNamespaceDirs() {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", harness.TestNamespace))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup/unified", harness.TestNamespace), filepath.Join("/run/containerd/runc", harness.TestNamespace))
	for _, d := range dirs {
		_ = os.Remove(d) // only an empty one goes
	}
}

// scrubContainer removes what a failed restore of id left, so that a
// failing test leaves the host as clean as a passing one: its processes,
// mounts (deepest first), runc state and cgroups.
func scrubContainer(id string) {
	if id == "" {
		return
	}
	for _, pid := range pidsWhere(func(pid int) bool { return inCgroupNamed(pid, id) }) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	points := mountsNamed(id)
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
	states, _ := filepath.Glob(filepath.Join("/run/containerd/runc/*", id))
	for _, s := range states {
		if len(mountsNamed(id)) == 0 {
			_ = os.RemoveAll(s)
		}
	}
	time.Sleep(200 * time.Millisecond) // the killed processes leave their cgroups
	dirs := cgroupDirsNamed(id)
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}
