package integration

// The shim's restore under signals on the kubelet's route: a pod whose
// annotation names a checkpoint image is restored by the shim when CRI's
// StartContainer creates (the checks) and starts (CRIU's restore, the
// CUDA resume) its task. The kubelet's request goes away at each step of
// the restore's table (its runtime request timeout, or a crictl ended by
// Ctrl-C: either way CRI's context is cancelled), and the shim is killed
// (SIGKILL) before CRIU's restore and before the CUDA resume. Each ends
// with the pod's container running the restored workload intact, or
// failed cleanly: no task left in containerd, no restored process alive,
// running or stopped, and an error in the container's status.

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

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
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
	reg := startRegistry(t)
	ck := checkpointOnNode1(t, reg, reg.addr+"/cryo/app:v1")
	dir := t.TempDir()
	work := filepath.Join(dir, "restore")
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", work)
	usePolicy(t, allowOnly("default", []string{reg.addr + "/ckpt/"}, reg.addr))
	setting := filepath.Join(dir, "hold-setting")
	n := bootCRINodeWith(t, 1, false, func(n *criNode) {
		n.envExtra = []string{"PATH=" + filepath.Dir(failpointBin(t, "containerd-shim-cryo-v2")) + ":" + binDir() + ":" + n.bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
			"CRYO_TEST_HOLD=@" + setting}
	})
	n.importImages(newRootfs(n.t, n.imageDir()), map[string][]string{testImage: {"/bin/fakecuda-app", "100"}})
	ann := map[string]string{imagerestore.AnnImage: ck.ref}

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
			nt := n.with(t)
			p := nt.newPod(fmt.Sprintf("cut-%d", i), criHandler, ann)
			defer p.remove()
			if err := p.create(testImage); err != nil {
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
				wantNothingLeft(t, criNamespace, p.container, ownWork, "the cut "+c.String())
			}
			if !c.kill && c.step == orchestrate.StepResume &&
				logLine(n.log(), `msg="cryo: restore given up: the restored processes were killed and reaped"`, "id="+p.container+" ") < 0 {
				// CRIU had restored the tree: the shim must have killed it,
				// not found it gone.
				t.Errorf("the shim did not log the kill of the tree it restored:\n%s", linesWith(n.log(), p.container[:12]))
			}
		})
	}
	t.Run("RestoresAfter", func(t *testing.T) {
		nt := n.with(t)
		os.Remove(setting)
		p := nt.newPod("after", criHandler, ann)
		defer p.remove()
		if err := p.create(testImage); err != nil {
			t.Fatal(err)
		}
		if err := p.start(); err != nil {
			t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
		}
		nt.assertContinues(p, ck)
		criRestoredIntact(nt, p)
	})
	wantEmpty(t, work, "the cut restores and the last one")
}

// cutStart calls StartContainer with the shim held before c.step, then
// cancels the call or kills the shim, and returns the call's error.
func cutStart(t *testing.T, n *criNode, p *criPod, setting string, c criSigCase) error {
	t.Helper()
	hold := filepath.Join(filepath.Dir(setting), "hold")
	os.Remove(hold)
	if err := os.WriteFile(setting, []byte("restore/"+string(c.step)+":"+hold), 0o600); err != nil {
		t.Fatal(err)
	}
	defer func() { os.Remove(setting); os.Remove(hold) }()
	ctx, cancel := context.WithTimeout(context.Background(), criCall)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := n.rt.StartContainer(ctx, &criapi.StartContainerRequest{ContainerId: p.container})
		done <- err
	}()
	waitHold(t, hold, "the shim to reach restore step "+string(c.step))
	shim := criShimPid(n, p)
	if c.kill {
		restored := childrenNamed(shim, "fakecuda-app")
		if c.step == orchestrate.StepResume && len(restored) == 0 {
			t.Fatalf("no restored process under the shim (pid %d) before the CUDA resume", shim)
		}
		syscall.Kill(shim, syscall.SIGKILL)
		err := <-done
		if err == nil {
			t.Errorf("StartContainer succeeded with its shim killed before %s", c.step)
		}
		for _, pid := range restored {
			waitFor(t, 20*time.Second, "restored pid "+strconv.Itoa(pid)+" to be gone", func() bool { return !procfs.Alive(pid) })
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
func givenUpStart(t *testing.T, n *criNode, p *criPod, hold string, done <-chan error) error {
	t.Helper()
	end := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			return err
		case <-end:
			t.Fatalf("StartContainer did not return within 30 s of its cancel\n%s", linesWith(n.log(), p.container[:12]))
		case <-time.After(50 * time.Millisecond):
			if logLine(n.log(), `msg="cryo: restore given up`, "id="+p.container+" ") >= 0 {
				os.Remove(hold)
			}
		}
	}
}

// criSettled waits for the container to settle after a cut restore: it
// runs the restored workload intact, or it failed cleanly (true).
func criSettled(n *criNode, p *criPod, ck criCheckpoint, c criSigCase) bool {
	t := n.t
	t.Helper()
	var st *criapi.ContainerStatus
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st = p.status()
		running := st.State == criapi.ContainerState_CONTAINER_RUNNING
		if running && criTaskRuns(n, p.container) || st.State == criapi.ContainerState_CONTAINER_EXITED && !criTaskExists(n, p.container) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after %s the container is %s (reason %q) with its task there (running: %v); containerd's lines of it:\n%s",
				c, st.State, st.Reason, criTaskRuns(n, p.container), linesWith(n.log(), p.container[:12]))
		}
	}
	t.Logf("container %s after %s: %s (reason %q, message %q)", p.container, c, st.State, st.Reason, st.Message)
	if st.State == criapi.ContainerState_CONTAINER_RUNNING {
		if c.kill {
			t.Fatalf("the container runs with its shim killed before %s", c.step)
		}
		n.assertContinues(p, ck)
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
		t.Errorf("restored processes left behind after a failed restore: %s\n%s", strings.Join(desc, ", "), lastLines(n.log(), 40))
	}
	return true
}

// createEnded waits until the shim's Create of the container has ended,
// whichever way: a Create that containerd gave up on may carry on in the
// sandbox's shim, and what it leaves shows only then. A Create whose end
// the shim logs in none of these words gets 10 s.
func createEnded(n *criNode, p *criPod) {
	n.t.Helper()
	ends := []string{"cryo: create given up", "cryo: restore checked", "cryo: restore refused", "cryo: restore from image refused", "cryo: restore from image failed"}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, e := range ends {
			if i := logLine(n.log(), `msg="`+e, "id="+p.container); i >= 0 {
				n.t.Logf("the shim's create ended: %s", strings.Split(n.log(), "\n")[i])
				time.Sleep(200 * time.Millisecond) // its undo, logged before it returns
				return
			}
		}
	}
	n.t.Logf("the shim logged no end of its create of %s", p.container)
}

// criRestoredIntact: the container's process runs, not stopped, with CUDA
// running, and the shim logged the restore as done.
func criRestoredIntact(n *criNode, p *criPod) {
	t := n.t
	t.Helper()
	pid := criTaskPid(n, p.container)
	waitFor(t, 20*time.Second, "CUDA running in the restored container", func() bool {
		pg, err := fakecuda.ReadPage(pid)
		return err == nil && pg.State == 0
	})
	if st := procfs.State(pid); st == "T" || st == "t" {
		t.Fatalf("the restored process %d is stopped (%s)", pid, st)
	}
	if logLine(n.log(), `msg="cryo: restore done"`, "id="+p.container+" ") < 0 {
		t.Errorf("the shim did not log the restore of %s as done", p.container)
	}
}

// criShimPid is the pid of the shim that serves the pod's container (the
// sandbox's shim, which CRI groups its containers under, or the
// container's own).
func criShimPid(n *criNode, p *criPod) int {
	n.t.Helper()
	for _, id := range []string{p.container, p.id} {
		if pids := pidsOf("containerd-shim-cryo-v2", "-id "+id+" "); len(pids) > 0 {
			slices.Sort(pids)
			return pids[0]
		}
	}
	n.t.Fatalf("no shim process for pod %s (container %s)", p.id, p.container)
	return 0
}

func criCtx() context.Context { return namespaces.WithNamespace(context.Background(), criNamespace) }

// criTask is the container's task in containerd, if it has one.
func criTask(n *criNode, id string) (client.Task, error) {
	c, err := n.client.LoadContainer(criCtx(), id)
	if err != nil {
		return nil, err
	}
	return c.Task(criCtx(), nil)
}

func criTaskExists(n *criNode, id string) bool {
	_, err := criTask(n, id)
	return err == nil
}

func criTaskRuns(n *criNode, id string) bool {
	task, err := criTask(n, id)
	if err != nil {
		return false
	}
	st, err := task.Status(criCtx())
	return err == nil && st.Status == client.Running
}

func criTaskPid(n *criNode, id string) int {
	n.t.Helper()
	task, err := criTask(n, id)
	if err != nil {
		n.t.Fatalf("task of %s: %v", id, err)
	}
	return int(task.Pid())
}

// podProcesses are the processes named comm in the node's pods' cgroups.
func podProcesses(n *criNode, comm string) []int {
	var out []int
	for _, pid := range pidsOf(comm) {
		cgs, _ := procfs.Cgroups(pid)
		for _, cg := range cgs {
			if strings.Contains(cg.Path, n.cgroup) {
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
