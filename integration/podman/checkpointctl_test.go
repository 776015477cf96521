package podman

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/ociimage"
)

// checkpointctlBin is checkpointctl v1.4.0 as contrib/install-deps.sh
// installs it, or one on PATH.
func checkpointctlBin(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(harness.DepsDir(), "bin", "checkpointctl"); harness.FileExists(p) {
		return p
	}
	if p, err := exec.LookPath("checkpointctl"); err == nil {
		return p
	}
	t.Skipf("checkpointctl is not installed (neither %s/bin/checkpointctl nor on PATH): run contrib/install-deps.sh", harness.DepsDir())
	return ""
}

// TestCheckpointctl: every kind of cryo checkpoint image, exported
// (ociimage.Store.Export, which `cryo image export REF FILE` runs), reads in
// checkpointctl with its name, today's date as its creation, its engine,
// and the sizes of its checkpoint/ and rootfs diff.
func TestCheckpointctl(t *testing.T) {
	harness.RequireRoot(t)
	bin := checkpointctlBin(t)
	t.Run("Process", func(t *testing.T) {
		n := harness.NewNode(t, nil)
		_, dir, _ := harness.CheckpointApp(t, harness.FakeDriverEnv(t, ""))
		ref := "localhost/cryo/ckctl-process:1"
		harness.WantIn(t, n.Cryo(t, "image", "build", dir, ref), "built "+ref)
		// The name of a bare process is its manifest's id: "pid N".
		checkCheckpointctl(t, bin, exportImage(t, n, ref), "pid ", "containerd")
	})
	t.Run("Podman", func(t *testing.T) {
		p := harness.NewPodman(t)
		p.RunApp(t, "ckctl-app")
		export := filepath.Join(p.Dir, "app.tar.zst")
		p.Podman(t, "container", "checkpoint", "--export", export, "ckctl-app")
		n := harness.NewNode(t, nil)
		ref := "localhost/cryo/ckctl-podman:1"
		harness.WantIn(t, n.Cryo(t, "image", "build", export, ref), "built "+ref)
		checkCheckpointctl(t, bin, exportImage(t, n, ref), "ckctl-app", "Podman")
	})
	t.Run("Containerd", func(t *testing.T) {
		a := harness.NewCtrdNode(t, harness.CtrdVersions[len(harness.CtrdVersions)-1])
		a.ImportTestImage()
		app := harness.UniqueID("ckctl")
		a.RunApp(app)
		ckpt, _ := a.TaskCheckpoint(app, "--exit")
		a.WaitStopped(app)
		ref := "localhost/cryo/ckctl-containerd:1"
		harness.WantIn(t, a.Cryo(t, "image", "build", "--containerd", ckpt, ref), "built "+ref)
		checkCheckpointctl(t, bin, exportImage(t, a.ImgNode, ref), app, "containerd")
	})
	t.Run("Kubelet", func(t *testing.T) {
		n := harness.StartCRINode(t).With(t)
		p := n.RunPod("ckctl", harness.CRIHandler)
		archive := filepath.Join(n.Dir, "checkpoint-ckctl.tar")
		p.Checkpoint(archive)
		p.Remove()
		node := harness.NewNode(t, nil)
		ref := "localhost/cryo/ckctl-kubelet:1"
		harness.WantIn(t, node.Cryo(t, "image", "build", archive, ref), "built "+ref)
		checkCheckpointctl(t, bin, exportImage(t, node, ref), "app", "containerd")
	})
}

// exportImage exports ref from the node's store as `cryo image export`
// does, into a file next to it.
func exportImage(t *testing.T, n *harness.ImgNode, ref string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "export.tar")
	n.Cryo(t, "image", "export", ref, out)
	return out
}

// checkCheckpointctl runs `checkpointctl show` and `inspect` on an export
// and wants the name, today's date, the engine and the archive's sizes, as
// checkpointctl renders them.
func checkCheckpointctl(t *testing.T, bin, export, name, engine string) {
	t.Helper()
	ckpt, rootfs := exportSizes(t, export)
	show := harness.Run(t, time.Minute, nil, bin, "show", export)
	inspect := harness.Run(t, time.Minute, nil, bin, "inspect", "--ps-tree", "--stats", export)
	t.Logf("checkpointctl show:\n%s\ncheckpointctl inspect:\n%s", show, inspect)
	today, todayUTC := time.Now().Format("2006-01-02"), time.Now().UTC().Format("2006-01-02")
	for _, out := range []string{show, inspect} {
		harness.WantIn(t, out, name, engine, metadata.ByteToString(ckpt))
		if !strings.Contains(out, today) && !strings.Contains(out, todayUTC) {
			t.Errorf("checkpointctl shows no creation date of today (%s):\n%s", today, out)
		}
		if strings.Contains(out, "0001-01-01") {
			t.Errorf("checkpointctl shows a zero time:\n%s", out)
		}
		if rootfs > 0 {
			harness.WantIn(t, out, metadata.ByteToString(rootfs))
		}
	}
	harness.WantIn(t, inspect, "Image:", "Checkpoint size:", "CRIU dump statistics", "Process tree")
}

// exportSizes adds up the export's checkpoint/ files, and its rootfs diff.
func exportSizes(t *testing.T, export string) (ckpt, rootfs int64) {
	t.Helper()
	f, err := os.Open(export)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case hdr.Typeflag != tar.TypeReg:
		case strings.HasPrefix(hdr.Name, "checkpoint/"):
			ckpt += hdr.Size
		case hdr.Name == "rootfs-diff.tar":
			rootfs = hdr.Size
		}
	}
	if ckpt == 0 {
		t.Fatalf("%s has no checkpoint/ files", export)
	}
	return ckpt, rootfs
}

// TestPodmanCreateImage: an image made by `podman container checkpoint
// --create-image` of a CUDA container under cryo-runc, pushed to a
// registry, inspects as a podman checkpoint whose GPUs are unknown until
// it is pulled, and then read from cryo's manifest inside its layer.
func TestPodmanCreateImage(t *testing.T) {
	p := harness.NewPodman(t)
	p.RunApp(t, "ckimg-app")
	p.Podman(t, "container", "checkpoint", "--create-image", "localhost/ckimg:1", "ckimg-app")
	reg := harness.StartRegistry(t)
	ref := reg.Addr + "/ckpt/podman-image:1"
	p.Podman(t, "push", "--tls-verify=false", "--format", "oci", "localhost/ckimg:1", "docker://"+ref)

	ctx := context.Background()
	sum, err := ociimage.InspectRemote(ctx, ref, ociimage.RemoteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Kind != ociimage.KindPodman || sum.GPUsUnknown != ociimage.GPUsPullToRead || sum.Name != "ckimg-app" {
		t.Fatalf("remote: kind %q, GPUs unknown %q, name %q; want podman, %q, ckimg-app", sum.Kind, sum.GPUsUnknown, sum.Name, ociimage.GPUsPullToRead)
	}
	st, err := ociimage.OpenStore(ctx, filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pull(ctx, ref, ociimage.TransferOptions{}); err != nil {
		t.Fatal(err)
	}
	sum, err = st.InspectLocalWith(ctx, ref, ociimage.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.GPUsUnknown != "" || len(sum.GPUs) == 0 || sum.Created.IsZero() {
		t.Fatalf("local: GPUs %+v (unknown: %q), created %v; want the fake GPU from cryo's manifest", sum.GPUs, sum.GPUsUnknown, sum.Created)
	}
	list, err := st.ListImages(ctx)
	if err != nil || len(list) != 1 || list[0].Kind != ociimage.KindPodman || list[0].GPUs() != "unknown" {
		t.Fatalf("image list %+v %v", list, err)
	}
	t.Logf("remote: GPUs unknown (%s); pulled: %d× %s; ls: %+v", ociimage.GPUsPullToRead, len(sum.GPUs), sum.GPUs[0].Name, list[0])
}
