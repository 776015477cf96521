package integration

import (
	"os"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

// testCRIRestoreWrongGPU: node 2's GPU is not the checkpoint's model, so
// the restore is refused before any process is restored, and the kubelet
// sees why: StartContainer fails with cryo's reason, and the container's
// status (what `kubectl describe pod` shows) carries it too.
func testCRIRestoreWrongGPU(n *criNode, ck criCheckpoint) {
	t := n.t
	if err := os.WriteFile(n.gpusFile(), []byte(a100+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(n.gpusFile())
	p := n.newPod("wronggpu", criHandler, map[string]string{imagerestore.AnnImage: ck.ref})
	if err := p.create(testImage); err != nil {
		t.Fatal(err)
	}
	err := p.start()
	if err == nil {
		t.Fatalf("StartContainer on the wrong GPU succeeded\n%s", lastLines(n.log(), 30))
	}
	assertGPURefusal(t, "StartContainer", err.Error())
	wantIn(t, err.Error(), "restore of container app (") // the pod's name for it, not only its id
	st := p.status()
	if st.State != criapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("refused container: %s, want exited", st.State)
	}
	assertGPURefusal(t, "ContainerStatus "+st.Reason, st.Message)
	p.remove()
}

// testCRIContainerdRestore: containerd's own CRI restore (CreateContainer
// whose image is the checkpoint archive's path; on by default in 2.1) in a
// cryo pod: containerd unpacks the archive, pulls the base image by the
// digest the archive records, applies the rootfs diff, and creates the
// task with the checkpoint directory, which the shim restores like any
// other, CUDA resumed.
func testCRIContainerdRestore(n *criNode, ck criCheckpoint) {
	p := n.newPod("ctrdrestore", criHandler, nil)
	if err := p.create(ck.archive); err != nil {
		n.t.Fatal(err)
	}
	if err := p.start(); err != nil {
		n.t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
	}
	n.assertContinues(p, ck)
	p.assertMarker()
	p.remove()
}

// testCRIRuncPod: the same archive restored by containerd's CRI restore in
// a pod of the stock runc runtime. runc restores the processes with CRIU
// and knows nothing of CUDA: the container shows RUNNING, but the app's
// CUDA state stays checkpointed, so it never prints again. This is the
// limit docs/kubernetes.md describes (use the cryo RuntimeClass, or
// cryo-runc as the runc binary); the test keeps the description true.
func testCRIRuncPod(n *criNode, ck criCheckpoint) {
	t := n.t
	p := n.newPod("runcpod", criRuncHandler, nil)
	if err := p.create(ck.archive); err != nil {
		t.Fatal(err)
	}
	if err := p.start(); err != nil {
		t.Fatalf("StartContainer of a runc pod from a cryo checkpoint: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // 15 ticks of a running app
	st := p.status()
	ticks := ctrdTicks(t, p.logPath())
	if st.State != criapi.ContainerState_CONTAINER_RUNNING || len(ticks) != 0 {
		t.Fatalf("runc pod from a cryo checkpoint: %s, ticks %v; docs/kubernetes.md says RUNNING with no progress", st.State, ticks)
	}
	t.Logf("runc pod: %s, no tick in 1.5 s (CUDA never resumed)", st.State)
	p.remove()
}
