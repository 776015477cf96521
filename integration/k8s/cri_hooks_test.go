package k8s

import (
	"path/filepath"
	"strings"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/hook"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testCRIPreCheckpointHook: the kubelet's checkpoint (CRI
// CheckpointContainer) of a pod whose cryo.io/pre-checkpoint annotation
// names an exec hook runs it before the dump, through containerd's exec;
// a pod whose hook fails is not checkpointed, and runs on, ticking.
func testCRIPreCheckpointHook(n *harness.CRINode, _ harness.CRICheckpoint) {
	t := n.T
	ok := n.NewPod("prehook", harness.CRIHandler, map[string]string{
		hook.AnnPreCheckpoint: `exec:["/bin/sh","-c","echo slept > /slept"]`})
	if err := ok.Create(harness.TestImage); err != nil {
		t.Fatal(err)
	}
	if err := ok.Start(); err != nil {
		t.Fatal(err)
	}
	n.WaitTicksIn(ok.LogPath(), 3)
	ok.Checkpoint(filepath.Join(n.Dir, "checkpoint-prehook.tar"))
	if got := ok.Exec("/bin/cat", "/slept"); got != "slept\n" {
		t.Fatalf("/slept is %q: the pre-checkpoint hook did not run", got)
	}
	n.WaitTicksIn(ok.LogPath(), 2)
	ok.Remove()

	bad := n.NewPod("prehook-fails", harness.CRIHandler, map[string]string{
		hook.AnnPreCheckpoint: `exec:["/bin/sh","-c","echo not ready; exit 3"]`})
	if err := bad.Create(harness.TestImage); err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(); err != nil {
		t.Fatal(err)
	}
	n.WaitTicksIn(bad.LogPath(), 3)
	ctx, cancel := n.Ctx()
	defer cancel()
	_, err := n.Rt.CheckpointContainer(ctx, &criapi.CheckpointContainerRequest{ContainerId: bad.Container,
		Location: filepath.Join(n.Dir, "checkpoint-prehook-fails.tar"), Timeout: int64(harness.CRICall.Seconds())})
	if err == nil || !strings.Contains(err.Error(), "pre-hook") || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("CheckpointContainer with a failing hook: %v, want the hook's failure and answer", err)
	}
	t.Logf("refused: %v", err)
	n.WaitTicksIn(bad.LogPath(), 3)
	if st := bad.Status(); st.State != criapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container after the refused checkpoint: %s, want running", st.State)
	}
	bad.Remove()
}
