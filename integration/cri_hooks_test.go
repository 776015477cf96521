package integration

import (
	"path/filepath"
	"strings"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/internal/hook"
)

// testCRIPreCheckpointHook: the kubelet's checkpoint (CRI
// CheckpointContainer) of a pod whose cryo.io/pre-checkpoint annotation
// names an exec hook runs it before the dump, through containerd's exec;
// a pod whose hook fails is not checkpointed, and runs on, ticking.
func testCRIPreCheckpointHook(n *criNode, _ criCheckpoint) {
	t := n.t
	ok := n.newPod("prehook", criHandler, map[string]string{
		hook.AnnPreCheckpoint: `exec:["/bin/sh","-c","echo slept > /slept"]`})
	if err := ok.create(testImage); err != nil {
		t.Fatal(err)
	}
	if err := ok.start(); err != nil {
		t.Fatal(err)
	}
	n.waitTicksIn(ok.logPath(), 3)
	ok.checkpoint(filepath.Join(n.dir, "checkpoint-prehook.tar"))
	if got := ok.exec("/bin/cat", "/slept"); got != "slept\n" {
		t.Fatalf("/slept is %q: the pre-checkpoint hook did not run", got)
	}
	n.waitTicksIn(ok.logPath(), 2)
	ok.remove()

	bad := n.newPod("prehook-fails", criHandler, map[string]string{
		hook.AnnPreCheckpoint: `exec:["/bin/sh","-c","echo not ready; exit 3"]`})
	if err := bad.create(testImage); err != nil {
		t.Fatal(err)
	}
	if err := bad.start(); err != nil {
		t.Fatal(err)
	}
	n.waitTicksIn(bad.logPath(), 3)
	ctx, cancel := n.ctx()
	defer cancel()
	_, err := n.rt.CheckpointContainer(ctx, &criapi.CheckpointContainerRequest{ContainerId: bad.container,
		Location: filepath.Join(n.dir, "checkpoint-prehook-fails.tar"), Timeout: int64(criCall.Seconds())})
	if err == nil || !strings.Contains(err.Error(), "pre-hook") || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("CheckpointContainer with a failing hook: %v, want the hook's failure and answer", err)
	}
	t.Logf("refused: %v", err)
	n.waitTicksIn(bad.logPath(), 3)
	if st := bad.status(); st.State != criapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container after the refused checkpoint: %s, want running", st.State)
	}
	bad.remove()
}
