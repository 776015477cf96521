package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"github.com/containerd/containerd/v2/client"
	ctrdseccomp "github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/criutest"
	"github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
)

// ocLoop ticks to stdout and to /out/ticks, a bind mount of the host's.
const ocLoop = `i=0; while :; do i=$((i+1)); echo "tick $i"; echo "tick $i" >> /out/ticks; sleep 0.2; done`

// withTickFile bind-mounts dir at /out and runs ocLoop.
func withTickFile(dir string) func(*specs.Spec) {
	return func(s *specs.Spec) {
		s.Process.Args = []string{"/bin/sh", "-c", ocLoop}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/out", Type: "bind", Source: dir, Options: []string{"rbind", "rw"}})
	}
}

func lineCount(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

func TestOutcomeKillsExcessRunc(t *testing.T) {
	out := t.TempDir()
	c := newCFContainer(t, func(s *specs.Spec) { specPrivileged(s); withTickFile(out)(s) })
	c.Start()
	img := c.Checkpoint()
	ticks := filepath.Join(out, "ticks")
	before := lineCount(t, ticks)
	c.Edit(specRestricted)
	assertOutcomeKills(t, c, img, ticks, before, "uid is 0")
}

// nothingLeft checks that a refused restore of container id left no runc
// state, no process in its cgroups, no cgroup and no mount.
func nothingLeft(t *testing.T, id, root, work string) {
	t.Helper()
	if root != "" {
		if list, _ := harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "list", "-q"); strings.Contains(list, id) {
			t.Errorf("runc still knows the container: %s", list)
		}
	}
	for _, pat := range []string{"*", "*/*", "*/*/*", "*/*/*/*"} {
		if cgs, _ := filepath.Glob("/sys/fs/cgroup/" + pat + "/" + id); len(cgs) > 0 {
			t.Errorf("cgroups left: %v", cgs)
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, id) || (work != "" && strings.Contains(line, work)) || strings.Contains(line, ".criu.cgyard") {
			t.Errorf("mount left: %s", line)
		}
	}
	// Other tests may run on this host: look for this test's workload and
	// for a CRIU working in this restore's work directory only.
	ps, _ := harness.RunErr(10*time.Second, nil, "ps", "-eo", "pid,stat,args")
	for _, line := range strings.Split(ps, "\n") {
		if strings.Contains(line, ">> /out/ticks") {
			t.Errorf("process left: %s", line)
		}
		if f := strings.Fields(line); work != "" && len(f) > 0 && strings.Contains(line, "criu") {
			if cwd, _ := os.Readlink("/proc/" + f[0] + "/cwd"); strings.HasPrefix(cwd, work) {
				t.Errorf("CRIU left: %s", line)
			}
		}
	}
}

// The same through containerd's shim: a checkpoint of a privileged task,
// restored into a container of containerd's default spec.
func TestOutcomeKillsExcessShim(t *testing.T) {
	d := harness.NewDaemon(t, harness.CtrdVersions[1], false)
	d.EnvExtra = []string{"PATH=" + filepath.Dir(harness.FailpointBin(t, "containerd-shim-cryo-v2")) + ":" + harness.BinDir() + ":" + d.Bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CRYO_TEST_SKIP_CONFINE=1"}
	d.Start()
	d.ImportTestImage()
	d.StartApp(d.NewContainerWith("oc-src", nil, oci.WithPrivileged))
	ref, _ := d.TaskCheckpoint("oc-src")
	ctx := harness.NamespacedCtx()
	ckpt, err := d.Client.GetImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	dst := d.NewContainer("oc-dst")
	task, err := dst.NewTask(ctx, cio.LogFile(d.LogPath("oc-dst")), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		t.Fatalf("create the restored task: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	err = task.Start(ctx)
	if err == nil {
		t.Fatalf("the restore was not refused")
	}
	t.Logf("refused: %v", err)
	for _, w := range []string{"the restored tasks were checked before they ran and killed", "capabilities (bounding)", "nothing was restored"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal lacks %q", w)
		}
	}
	time.Sleep(time.Second)
	if data, _ := os.ReadFile(d.LogPath("oc-dst")); strings.Contains(string(data), "tick") {
		t.Errorf("the restored workload ran:\n%s", data)
	}
	// The verdict is in the refused container's bundle (containerd's state
	// directory), which the task's deletion removes: read it first.
	verdicts, _ := filepath.Glob(filepath.Join(d.Dir, "state", "io.containerd.runtime.v2.task", harness.TestNamespace, "oc-dst", "cryo-outcome.json"))
	if len(verdicts) != 1 {
		t.Errorf("no verdict in the bundle: %v", verdicts)
	}
	if _, err := task.Delete(ctx); err != nil {
		t.Errorf("delete the refused task: %v", err)
	}
	nothingLeft(t, "oc-dst", "", "")
	if pids, err := task.Pids(ctx); err == nil && len(pids) > 0 {
		t.Errorf("the refused task has processes: %v", pids)
	}
}

// threadsC starts 200 threads that sleep, then ticks.
const threadsC = `#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *idle(void *a) { for (;;) pause(); return a; }
int main(void) {
	for (int i = 0; i < 200; i++) { pthread_t t; pthread_create(&t, 0, idle, 0); }
	for (int i = 1;; i++) { printf("tick %d\n", i); fflush(stdout); usleep(200000); }
}
`

// The check's cost for a container with 200 threads, from the verdict it
// leaves in the bundle, on a restore that must pass it: without seccomp,
// and under containerd's default profile, where CRIU also fetches and
// writes every thread's filter (patch 0005) and the check reads and
// evaluates them.
func TestOutcomeCost200Threads(t *testing.T) {
	harness.RequireRoot(t)
	src := filepath.Join(t.TempDir(), "threads.c")
	if err := os.WriteFile(src, []byte(threadsC), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(src), "threads")
	harness.Run(t, time.Minute, nil, "gcc", "-O2", "-static", "-pthread", "-o", bin, src)
	t.Run("plain", func(t *testing.T) { outcomeCost(t, bin, false) })
	t.Run("seccomp", func(t *testing.T) { outcomeCost(t, bin, true) })
}

func outcomeCost(t *testing.T, bin string, withSeccomp bool) {
	c := newCFContainer(t, func(s *specs.Spec) {
		s.Process.Args = []string{"/bin/threads"}
		if withSeccomp {
			s.Linux.Seccomp = ctrdseccomp.DefaultProfile(s)
		}
	})
	harness.CopyFile(t, bin, filepath.Join(c.bundle, "rootfs/bin/threads"), 0o755)
	c.Start()
	img := c.Checkpoint()
	before := c.LastTick()
	// --debug: cryo-runc prints its restore's steps only then.
	c.out = harness.RwRunDetached(t, c.Env(), harness.CryoBin(t, "cryo-runc"), append([]string{"--debug"}, c.restoreArgs(img)...)...)
	c.WaitTick(before + 3)
	data, err := os.ReadFile(filepath.Join(c.bundle, "cryo-outcome.json"))
	if err != nil {
		t.Fatalf("no verdict: %v", err)
	}
	var v struct {
		Passed         bool
		Tasks, Threads int
		Seconds        float64
		CPU            float64 `json:"cpu_seconds"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if !v.Passed || v.Threads < 201 {
		t.Fatalf("verdict %s: want a pass over 201 threads", data)
	}
	t.Logf("outcome check: %d task(s), %d threads in %.2f ms (%.2f ms CPU)", v.Tasks, v.Threads, v.Seconds*1000, v.CPU*1000)
	if withSeccomp {
		t.Logf("CRIU's fetch and write of the filters: %.2f ms", criuFilterWrite(t, filepath.Join(img+"-rwork", "restore.log")))
	}
	harness.WaitFor(t, 10*time.Second, "the restore's steps", func() bool { return strings.Contains(c.out.String(), "verify restored") })
	for _, l := range strings.Split(c.out.String(), "\n") {
		if strings.Contains(l, "verify restored") {
			t.Logf("%s", l)
		}
	}
	if v.Seconds > 0.5 {
		t.Errorf("the check took %.0f ms for %d threads; it must stay in milliseconds", v.Seconds*1000, v.Threads)
	}
}

// criuFilterWrite is the time patch 0005 logs for its fetch and write of
// the filters, in ms.
func criuFilterWrite(t *testing.T, log string) float64 {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`seccomp filters: \d+ filter\(s\) of \d+ thread\(s\) written to \S+ in (\d+) us`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s has no line of CRIU patch 0005's: is it in? (CRYO_CRIU)", log)
	}
	us, _ := strconv.Atoi(string(m[1]))
	return float64(us) / 1000
}

// The hostile pass's first escape: the mountpoints image's entry of a
// masked path (/proc/acpi, an empty read-only tmpfs) turned into a bind of
// the container's writable proc, and the manifest resealed. With the
// confine step off, the check of the restored tasks must refuse it.
func TestOutcomeKillsMaskedPathAsProc(t *testing.T) {
	out := t.TempDir()
	c := newCFContainer(t, func(s *specs.Spec) {
		specRestricted(s)
		s.Process.User = specs.User{UID: harness.RestrictedUID(t), GID: harness.RestrictedUID(t)}
		withTickFile(out)(s)
	})
	c.Start()
	img := c.Checkpoint()
	names, _ := filepath.Glob(filepath.Join(img, "mountpoints-*.img"))
	if len(names) != 1 {
		t.Fatalf("mount images: %v", names)
	}
	var procDev uint32
	criutest.EditImage(t, img, filepath.Base(names[0]), &mnt.MntEntry{}, func(m proto.Message) {
		if e := m.(*mnt.MntEntry); strings.HasSuffix(e.GetMountpoint(), "/proc") {
			procDev = e.GetRootDev()
		}
	})
	edited := 0
	harness.EditImage(t, img, filepath.Base(names[0]), &mnt.MntEntry{}, func(m proto.Message) {
		e := m.(*mnt.MntEntry)
		if !strings.HasSuffix(e.GetMountpoint(), "/proc/acpi") {
			return
		}
		proc, rw, root := uint32(1), uint32(0), "/"
		e.Fstype, e.RootDev, e.Root, e.Flags, e.SbFlags = &proc, &procDev, &root, &rw, &rw
		e.Source = proto.String("proc")
		e.Options = proto.String("")
		edited++
	})
	if edited != 1 || procDev == 0 {
		t.Fatalf("edited %d entries (proc's device %d)", edited, procDev)
	}
	ticks := filepath.Join(out, "ticks")
	before := lineCount(t, ticks)
	msg, err := harness.RunErr(time.Minute, append(c.Env(), "CRYO_TEST_SKIP_CONFINE=1"), harness.FailpointBin(t, "cryo-runc"), c.restoreArgs(img)...)
	if err == nil {
		t.Fatalf("the restore was not refused:\n%s", msg)
	}
	t.Logf("refused:\n%s", msg)
	for _, w := range []string{"the restored tasks were checked before they ran and killed", "/proc/acpi"} {
		if !strings.Contains(msg, w) {
			t.Errorf("the refusal lacks %q:\n%s", w, msg)
		}
	}
	time.Sleep(time.Second)
	if n := lineCount(t, ticks); n != before {
		t.Errorf("the restored workload ran: %d tick lines before the restore, %d after", before, n)
	}
	nothingLeft(t, c.id, c.root, img+"-rwork")
}

// assertOutcomeKills restores img through the failpoint cryo-runc with the
// pre-restore checks off: the outcome check alone must refuse it, naming
// field, kill the tree before its code runs (no new tick in ticks) and
// leave nothing behind.
func assertOutcomeKills(t *testing.T, c *cfContainer, img, ticks string, before int, field string) {
	t.Helper()
	env := append(c.Env(), "CRYO_TEST_SKIP_CONFINE=1")
	began := time.Now()
	msg, err := harness.RunErr(time.Minute, env, harness.FailpointBin(t, "cryo-runc"), c.restoreArgs(img)...)
	if err == nil {
		t.Fatalf("the restore was not refused:\n%s", msg)
	}
	t.Logf("refused in %v:\n%s", time.Since(began), msg)
	for _, w := range []string{"the restored tasks were checked before they ran and killed", field, "nothing was restored"} {
		if !strings.Contains(msg, w) {
			t.Errorf("the refusal lacks %q", w)
		}
	}
	if strings.Contains(msg, "confine: ") {
		t.Errorf("the confine step ran; the failpoint should have switched it off")
	}
	time.Sleep(time.Second)
	if n := lineCount(t, ticks); n != before {
		t.Errorf("the restored workload ran: %d tick lines before the restore, %d after", before, n)
	}
	nothingLeft(t, c.id, c.root, img+"-rwork")
}
