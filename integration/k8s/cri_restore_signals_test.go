package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criSigCase is one way the restore of a pod is cut at one step.
type criSigCase struct {
	step orchestrate.StepName
	kill bool // SIGKILL of the shim; else the CRI request is cancelled
}

func (c criSigCase) String() string {
	if c.kill {
		return string(c.step) + "/SIGKILL-shim"
	}
	return string(c.step) + "/cancel-StartContainer"
}

// TestCRIRestoreSignalSweep: every step of a container's restore (read
// from the restore's tables) × the CRI client's StartContainer request
// cancelled with the shim held before the step, and SIGKILL of the shim
// held before CRIU's restore and before the CUDA resume. A last pod from
// the same checkpoint image then restores and runs: nothing the cut
// restores left (a lock, a work directory, a task) stands in its way.
func TestCRIRestoreSignalSweep(t *testing.T) {
	reg := harness.StartRegistry(t)
	ck := harness.CheckpointOnNode1(t, reg, reg.Addr+"/cryo/app:v1")
	dir := t.TempDir()
	work := filepath.Join(dir, "restore")
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", work)
	harness.UsePolicy(t, harness.AllowOnly("default", []string{reg.Addr + "/ckpt/"}, reg.Addr))
	setting := filepath.Join(dir, "hold-setting")
	n := harness.BootCRINodeWith(t, 1, false, func(n *harness.CRINode) {
		n.EnvExtra = []string{"PATH=" + filepath.Dir(harness.FailpointBin(t, "containerd-shim-cryo-v2")) + ":" + harness.BinDir() + ":" + n.Bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
			"CRYO_TEST_HOLD=@" + setting}
	})
	n.ImportImages(harness.NewRootfs(n.T, n.ImageDir()), map[string][]string{harness.TestImage: {"/bin/fakecuda-app", "100"}})
	ann := map[string]string{imagerestore.AnnImage: ck.Ref}

	var cases []criSigCase
	for _, s := range orchestrate.RestoreSteps(true) {
		if s == orchestrate.StepRestore {
			// The shim's create of the checked restore's task, the
			// last of Create, after the steps of the checks.
			cases = append(cases, criSigCase{step: orchestrate.StepCreateTask})
		}
		cases = append(cases, criSigCase{step: s})
	}
	cases = append(cases, criSigCase{orchestrate.StepRestore, true}, criSigCase{orchestrate.StepResume, true})
	for i, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			nt := n.With(t)
			p := nt.NewPod(fmt.Sprintf("cut-%d", i), harness.CRIHandler, ann)
			defer p.Remove()
			if err := p.Create(harness.TestImage); err != nil {
				t.Fatal(err)
			}
			err := cutStart(t, nt, p, setting, c)
			t.Logf("StartContainer: %v", err)
			if criSettled(nt, p, ck, c) {
				createEnded(nt, p)
				// A killed shim's work directory goes at the next
				// restore's (imagerestore.NewWorkDir): RestoresAfter
				// checks it.
				ownWork := work
				if c.kill {
					ownWork = ""
				}
				harness.WantNothingLeft(t, harness.CRINamespace, p.Container, ownWork, "the cut "+c.String())
			}
			if !c.kill && c.step == orchestrate.StepResume &&
				harness.LogLine(n.Log(), `msg="cryo: restore given up: the restored processes were killed and reaped"`, "id="+p.Container+" ") < 0 {
				// CRIU had restored the tree: the shim must have killed it,
				// not found it gone.
				t.Errorf("the shim did not log the kill of the tree it restored:\n%s", linesWith(n.Log(), p.Container[:12]))
			}
		})
	}
	t.Run("RestoresAfter", func(t *testing.T) {
		nt := n.With(t)
		os.Remove(setting)
		p := nt.NewPod("after", harness.CRIHandler, ann)
		defer p.Remove()
		if err := p.Create(harness.TestImage); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
		}
		nt.AssertContinues(p, ck)
		criRestoredIntact(nt, p)
	})
	harness.WantEmpty(t, work, "the cut restores and the last one")
}

// cutStart calls StartContainer with the shim held before c.step, then
// cancels the call or kills the shim, and returns the call's error.
func cutStart(t *testing.T, n *harness.CRINode, p *harness.CRIPod, setting string, c criSigCase) error {
	t.Helper()
	hold := filepath.Join(filepath.Dir(setting), "hold")
	os.Remove(hold)
	if err := os.WriteFile(setting, []byte("restore/"+string(c.step)+":"+hold), 0o600); err != nil {
		t.Fatal(err)
	}
	defer func() { os.Remove(setting); os.Remove(hold) }()
	ctx, cancel := context.WithTimeout(context.Background(), harness.CRICall)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := n.Rt.StartContainer(ctx, &criapi.StartContainerRequest{ContainerId: p.Container})
		done <- err
	}()
	harness.WaitHold(t, hold, "the shim to reach restore step "+string(c.step))
	shim := criShimPid(n, p)
	if c.kill {
		restored := harness.ChildrenNamed(shim, "fakecuda-app")
		if c.step == orchestrate.StepResume && len(restored) == 0 {
			t.Fatalf("no restored process under the shim (pid %d) before the CUDA resume", shim)
		}
		syscall.Kill(shim, syscall.SIGKILL)
		err := <-done
		if err == nil {
			t.Errorf("StartContainer succeeded with its shim killed before %s", c.step)
		}
		for _, pid := range restored {
			harness.WaitFor(t, 20*time.Second, "restored pid "+strconv.Itoa(pid)+" to be gone", func() bool { return !procfs.Alive(pid) })
		}
		return err
	}
	cancel()
	err := givenUpStart(t, n, p, hold, done)
	os.Remove(hold)
	return err
}

// givenUpStart waits for the cancelled StartContainer's error. CRI gives
// up on the call and deletes the task, and during the shim's Start the
// Delete waits for the restore to end: the hold, which stands for the
// step the restore was at when the call was cut, is released once the
// shim has noted the Delete. A cut during Create (the checks) reaches no
// Start: CRI answers by itself, and the hold goes after it.
func givenUpStart(t *testing.T, n *harness.CRINode, p *harness.CRIPod, hold string, done <-chan error) error {
	t.Helper()
	end := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			return err
		case <-end:
			t.Fatalf("StartContainer did not return within 30 s of its cancel\n%s", linesWith(n.Log(), p.Container[:12]))
		case <-time.After(50 * time.Millisecond):
			if harness.LogLine(n.Log(), `msg="cryo: restore given up`, "id="+p.Container+" ") >= 0 {
				os.Remove(hold)
			}
		}
	}
}

// criSettled waits for the container to settle after a cut restore: it
// runs the restored workload intact, or it failed cleanly (true).
func criSettled(n *harness.CRINode, p *harness.CRIPod, ck harness.CRICheckpoint, c criSigCase) bool {
	t := n.T
	t.Helper()
	var st *criapi.ContainerStatus
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st = p.Status()
		running := st.State == criapi.ContainerState_CONTAINER_RUNNING
		if running && criTaskRuns(n, p.Container) || st.State == criapi.ContainerState_CONTAINER_EXITED && !criTaskExists(n, p.Container) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after %s the container is %s (reason %q) with its task there (running: %v); containerd's lines of it:\n%s",
				c, st.State, st.Reason, criTaskRuns(n, p.Container), linesWith(n.Log(), p.Container[:12]))
		}
	}
	t.Logf("container %s after %s: %s (reason %q, message %q)", p.Container, c, st.State, st.Reason, st.Message)
	if st.State == criapi.ContainerState_CONTAINER_RUNNING {
		if c.kill {
			t.Fatalf("the container runs with its shim killed before %s", c.step)
		}
		n.AssertContinues(p, ck)
		criRestoredIntact(n, p)
		return false
	}
	if st.Reason == "" && st.Message == "" {
		t.Errorf("the failed container's status says nothing of why")
	}
	// Stay a while: a process CRIU restored and nobody resumed would
	// show up late, stopped.
	time.Sleep(time.Second)
	if left := podProcesses(n, "fakecuda-app"); len(left) > 0 {
		var desc []string
		for _, pid := range left {
			desc = append(desc, fmt.Sprintf("%d (%s)", pid, procfs.State(pid)))
		}
		t.Errorf("restored processes left behind after a failed restore: %s\n%s", strings.Join(desc, ", "), harness.LastLines(n.Log(), 40))
	}
	return true
}

// createEnded waits until the shim's Create of the container has ended,
// whichever way: a Create that containerd gave up on may carry on in the
// sandbox's shim, and what it leaves shows only then. A Create whose end
// the shim logs in none of these words gets 10 s.
func createEnded(n *harness.CRINode, p *harness.CRIPod) {
	n.T.Helper()
	ends := []string{"cryo: create given up", "cryo: restore checked", "cryo: restore refused", "cryo: restore from image refused", "cryo: restore from image failed"}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, e := range ends {
			if i := harness.LogLine(n.Log(), `msg="`+e, "id="+p.Container); i >= 0 {
				n.T.Logf("the shim's create ended: %s", strings.Split(n.Log(), "\n")[i])
				time.Sleep(200 * time.Millisecond) // its undo, logged before it returns
				return
			}
		}
	}
	n.T.Logf("the shim logged no end of its create of %s", p.Container)
}

// criRestoredIntact: the container's process runs, not stopped, with CUDA
// running, and the shim logged the restore as done.
func criRestoredIntact(n *harness.CRINode, p *harness.CRIPod) {
	t := n.T
	t.Helper()
	pid := criTaskPid(n, p.Container)
	harness.WaitFor(t, 20*time.Second, "CUDA running in the restored container", func() bool {
		pg, err := fakecuda.ReadPage(pid)
		return err == nil && pg.State == 0
	})
	if st := procfs.State(pid); st == "T" || st == "t" {
		t.Fatalf("the restored process %d is stopped (%s)", pid, st)
	}
	if harness.LogLine(n.Log(), `msg="cryo: restore done"`, "id="+p.Container+" ") < 0 {
		t.Errorf("the shim did not log the restore of %s as done", p.Container)
	}
}

// criShimPid is the pid of the shim that serves the pod's container (the
// sandbox's shim, which CRI groups its containers under, or the
// container's own).
func criShimPid(n *harness.CRINode, p *harness.CRIPod) int {
	n.T.Helper()
	for _, id := range []string{p.Container, p.ID} {
		if pids := harness.PidsOf("containerd-shim-cryo-v2", "-id "+id+" "); len(pids) > 0 {
			slices.Sort(pids)
			return pids[0]
		}
	}
	n.T.Fatalf("no shim process for pod %s (container %s)", p.ID, p.Container)
	return 0
}

func criCtx() context.Context {
	return namespaces.WithNamespace(context.Background(), harness.CRINamespace)
}

// criTask is the container's task in containerd, if it has one.
func criTask(n *harness.CRINode, id string) (client.Task, error) {
	c, err := n.Client.LoadContainer(criCtx(), id)
	if err != nil {
		return nil, err
	}
	return c.Task(criCtx(), nil)
}

func criTaskExists(n *harness.CRINode, id string) bool {
	_, err := criTask(n, id)
	return err == nil
}

func criTaskRuns(n *harness.CRINode, id string) bool {
	task, err := criTask(n, id)
	if err != nil {
		return false
	}
	st, err := task.Status(criCtx())
	return err == nil && st.Status == client.Running
}

func criTaskPid(n *harness.CRINode, id string) int {
	n.T.Helper()
	task, err := criTask(n, id)
	if err != nil {
		n.T.Fatalf("task of %s: %v", id, err)
	}
	return int(task.Pid())
}

// podProcesses are the processes named comm in the node's pods' cgroups.
func podProcesses(n *harness.CRINode, comm string) []int {
	var out []int
	for _, pid := range harness.PidsOf(comm) {
		cgs, _ := procfs.Cgroups(pid)
		for _, cg := range cgs {
			if strings.Contains(cg.Path, n.Cgroup) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// linesWith are the lines of log that contain word.
func linesWith(log, word string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
