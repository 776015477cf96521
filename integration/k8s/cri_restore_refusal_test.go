package k8s

import (
	"os"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testCRIRestoreWrongGPU: node 2's GPU is not the checkpoint's model, so
// the restore is refused before any process is restored, and the kubelet
// sees why: StartContainer fails with cryo's reason, and the container's
// status (what `kubectl describe pod` shows) carries it too.
func testCRIRestoreWrongGPU(n *harness.CRINode, ck harness.CRICheckpoint) {
	t := n.T
	if err := os.WriteFile(n.GpusFile(), []byte(harness.A100+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(n.GpusFile())
	p := n.NewPod("wronggpu", harness.CRIHandler, map[string]string{imagerestore.AnnImage: ck.Ref})
	if err := p.Create(harness.TestImage); err != nil {
		t.Fatal(err)
	}
	err := p.Start()
	if err == nil {
		t.Fatalf("StartContainer on the wrong GPU succeeded\n%s", harness.LastLines(n.Log(), 30))
	}
	harness.AssertGPURefusal(t, "StartContainer", err.Error())
	harness.WantIn(t, err.Error(), "restore of container app (") // the pod's name for it, not only its id
	st := p.Status()
	if st.State != criapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("refused container: %s, want exited", st.State)
	}
	harness.AssertGPURefusal(t, "ContainerStatus "+st.Reason, st.Message)
	p.Remove()
}

// testCRIContainerdRestore: containerd's own CRI restore (CreateContainer
// whose image is the checkpoint archive's path; on by default in 2.1) in a
// cryo pod: containerd unpacks the archive, pulls the base image by the
// digest the archive records, applies the rootfs diff, and creates the
// task with the checkpoint directory, which the shim restores like any
// other, CUDA resumed.
func testCRIContainerdRestore(n *harness.CRINode, ck harness.CRICheckpoint) {
	p := n.NewPod("ctrdrestore", harness.CRIHandler, nil)
	if err := p.Create(ck.Archive); err != nil {
		n.T.Fatal(err)
	}
	if err := p.Start(); err != nil {
		n.T.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
	}
	n.AssertContinues(p, ck)
	p.AssertMarker()
	p.Remove()
}

// testCRIRuncPod: the same archive restored by containerd's CRI restore in
// a pod of the stock runc runtime. runc restores the processes with CRIU
// and knows nothing of CUDA: the container shows RUNNING, but the app's
// CUDA state stays checkpointed, so it never prints again. This is the
// limit docs/kubernetes.md describes (use the cryo RuntimeClass, or
// cryo-runc as the runc binary); the test keeps the description true.
func testCRIRuncPod(n *harness.CRINode, ck harness.CRICheckpoint) {
	t := n.T
	p := n.NewPod("runcpod", harness.CRIRuncHandler, nil)
	if err := p.Create(ck.Archive); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("StartContainer of a runc pod from a cryo checkpoint: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // 15 ticks of a running app
	st := p.Status()
	ticks := harness.CtrdTicks(t, p.LogPath())
	if st.State != criapi.ContainerState_CONTAINER_RUNNING || len(ticks) != 0 {
		t.Fatalf("runc pod from a cryo checkpoint: %s, ticks %v; docs/kubernetes.md says RUNNING with no progress", st.State, ticks)
	}
	t.Logf("runc pod: %s, no tick in 1.5 s (CUDA never resumed)", st.State)
	p.Remove()
}
