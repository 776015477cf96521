package k8s

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRI drives containerd 2.x's CRI plugin the way the kubelet does,
// with pods in cryo's RuntimeClass (handler "cryo"). The subtests share
// one node.
func TestCRI(t *testing.T) {
	start := time.Now()
	n := harness.StartCRINode(t)
	t.Logf("CRI node ready in %s", time.Since(start).Round(time.Millisecond))
	for _, c := range []struct {
		name string
		run  func(*harness.CRINode)
	}{
		{"CheckpointContainer", testCRICheckpoint},
		{"ImageBuildKubeletArchive", testCRIImageBuild},
	} {
		t.Run(c.name, func(t *testing.T) {
			began := time.Now()
			c.run(n.With(t))
			t.Logf("%s took %s", c.name, time.Since(began).Round(time.Millisecond))
		})
	}
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

// testCRICheckpoint: CRI's CheckpointContainer (the kubelet's checkpoint
// API) of a CUDA container in a cryo pod writes an archive that holds the
// GPU manifest inside CRIU's images, with CRIU's log and statistics; the
// container runs on, its CUDA state resumed.
func testCRICheckpoint(n *harness.CRINode) {
	t := n.T
	p := n.RunPod("ckpt", harness.CRIHandler)
	location := filepath.Join(n.Dir, "checkpoint-ckpt.tar")
	took := p.Checkpoint(location)
	t.Logf("the CRI call took %s", took.Round(time.Millisecond))

	n.WaitTicksIn(p.LogPath(), 3) // ticks go on, with CUDA running (FakeTicks checks)
	if st := p.Status(); st.State != criapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container after checkpoint: %s, want running", st.State)
	}
	files := harness.ArchiveFiles(t, location)
	want := []string{"checkpoint/" + manifest.ManifestName, "checkpoint/inventory.img",
		"checkpoint/dump.log", "checkpoint/stats-dump", "config.dump", "spec.dump"}
	if n.CopiesCRIUStats() {
		want = append(want, "stats-dump", "dump.log") // where checkpointctl reads them
	}
	for _, name := range want {
		if _, ok := files[name]; !ok {
			t.Errorf("archive lacks %s; it holds %v", name, files)
		}
	}
	m := archiveManifest(t, location)
	if len(m.Processes) != 1 || len(m.Digests) == 0 {
		t.Fatalf("manifest: %d CUDA processes, %d digests; want 1 and some", len(m.Processes), len(m.Digests))
	}
	if fi, err := os.Stat(location); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("archive %s: %v; want mode 0600", location, err)
	}
	p.Remove()
}

// testCRIImageBuild: `cryo image build` of a kubelet archive makes an image
// of kind kubelet, without Podman's annotations (Podman cannot restore it),
// whose processes list the CUDA process once, under its pid in the
// container; `cryo image restore` refuses it and says why.
func testCRIImageBuild(n *harness.CRINode) {
	t := n.T
	p := n.RunPod("build", harness.CRIHandler)
	archive := filepath.Join(n.Dir, "checkpoint-build.tar")
	p.Checkpoint(archive)
	p.Remove()

	node := harness.NewNode(t, nil)
	ref := "localhost/cryo/kubelet-ckpt:1"
	harness.WantIn(t, node.Cryo(t, "image", "build", archive, ref), "built "+ref)
	var sum struct {
		Kind        string            `json:"kind"`
		Processes   []map[string]any  `json:"processes"`
		Annotations map[string]string `json:"annotations"`
	}
	js := node.Cryo(t, "inspect", "--json", ref)
	if err := json.Unmarshal([]byte(js), &sum); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	if sum.Kind != "kubelet" {
		t.Errorf("kind %q, want kubelet", sum.Kind)
	}
	if len(sum.Processes) != 1 || sum.Processes[0]["comm"] != "fakecuda-app" || sum.Processes[0]["cuda"] != true || sum.Processes[0]["pid"] != 1.0 {
		t.Errorf("processes %v, want one: pid 1 fakecuda-app, CUDA", sum.Processes)
	}
	if name, ok := sum.Annotations["io.podman.annotations.checkpoint.name"]; ok {
		t.Errorf("image carries Podman's annotation (name %q): Podman would try to restore it", name)
	}
	harness.WantIn(t, node.CryoFails(t, "image", "restore", ref), "kubelet checkpoint", "remedy")
}
