package integration

// The Kubernetes flow on a real GPU host, through CRI as the kubelet drives
// it: a cryo pod whose container was given GPU 0 the way a device plugin
// gives one (device nodes, driver libraries mounted, LD_LIBRARY_PATH) is
// checkpointed with CheckpointContainer; `cryo image build` makes a
// checkpoint image of the archive in the node's image store; a new pod
// annotated with that image, whose container was given GPU 1 (GPU 0 on a
// one-GPU host), carries the workload on there.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

// criDriverDir is where the container sees the driver's libraries, as
// device plugins mount them (GKE's, for one): a directory of their own,
// first in LD_LIBRARY_PATH.
const criDriverDir = "/usr/local/nvidia/lib64"

func TestGPUCRIPodToPod(t *testing.T) {
	uuids := gpuUUIDs(t, 1) // skips without a GPU
	// Onto GPU 1 where there is one; a one-GPU host restores onto GPU 0.
	target := min(1, len(uuids)-1)
	// The node's shims inherit containerd's environment: the image store
	// that `cryo image build` writes into below is the one they read, and
	// the policy that lets the pods' namespace restore from its repository.
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	t.Setenv("CRYO_IMAGE_STORE", store)
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	usePolicy(t, allowOnly("default", []string{"localhost/ckpt"}))
	n := startGPUCRINode(t)

	ck := checkpointGPUPod(t, n, uuids[0])
	// A tag of the pinned repository that the store holds with the pinned
	// digest is used without a pull: no registry is needed.
	ck.tag = "localhost/ckpt/gpu-pod:v1"
	took := timed(t, []string{"CRYO_IMAGE_STORE=" + store}, cryoBin(t, "cryo"), "image", "build", ck.archive, ck.tag)
	report(t, "cryo image build of the CRI archive", took)
	ck.ref = "localhost/ckpt/gpu-pod@" + storedDigest(t, store, ck.tag)

	p := n.newPod("gpu-restored", criHandler, map[string]string{imagerestore.AnnImage: ck.ref})
	if err := p.createWith(p.gpuConfig(t, target)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.start(); err != nil {
		t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
	}
	got := waitTicks(t, p.output, 0, "the restored pod's first ticks")
	report(t, fmt.Sprintf("restore of a new pod onto GPU %d to first output", target), time.Since(start))
	p.assertGPUContinues(t, ck, got, uuids[target])
	p.remove()
}

// checkpointGPUPod runs the CUDA workload in a cryo pod on GPU 0,
// checkpoints it through CRI, and removes the pod once it has ticked on
// after the checkpoint, as the kubelet would after a migration.
func checkpointGPUPod(t *testing.T, n *criNode, gpu0 string) criCheckpoint {
	p := n.newPod("gpu-source", criHandler, nil)
	if err := p.createWith(p.gpuConfig(t, 0)); err != nil {
		t.Fatal(err)
	}
	if err := p.start(); err != nil {
		t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
	}
	waitTicks(t, p.output, 2, "the pod's first ticks on GPU 0")
	p.assertOn(t, gpu0)
	ck := criCheckpoint{archive: filepath.Join(n.dir, "checkpoint-gpu.tar")}
	ck.before = lastTick(t, p.output())
	report(t, "CRI CheckpointContainer on GPU 0", p.checkpoint(ck.archive))
	// The kubelet's checkpoint leaves the container running, its CUDA
	// state resumed: the workload verifies it on the next ticks.
	ck.after = waitTicks(t, p.output, ck.before+2, "ticks after the checkpoint")
	p.remove()
	t.Logf("checkpoint after tick %d; the source pod printed up to tick %d", ck.before, ck.after)
	return ck
}

// assertGPUContinues checks that the restored workload's counter carried
// on from the checkpoint (its first tick follows the last one printed
// before it, no later than the source pod's last), that it ticks on, and
// that it runs on GPU gpu.
func (p *criPod) assertGPUContinues(t *testing.T, ck criCheckpoint, last int, gpu string) {
	t.Helper()
	first := firstTick(p.output())
	if first <= ck.before || first > ck.after+1 {
		t.Fatalf("restored pod's first tick %d; want one after %d (the checkpoint), at most %d (did the counter restart?)", first, ck.before, ck.after+1)
	}
	waitTicks(t, p.output, last+2, "the restored pod's ticks")
	if st := p.status(); st.State != criapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("restored container: %s (%s), want running", st.State, st.Message)
	}
	p.assertOn(t, gpu)
	t.Logf("restored: first tick %d (checkpoint after tick %d)", first, ck.before)
}

// startGPUCRINode starts a CRI node on the host's driver, with the CUDA
// workload's image and a pause image made of the GPU rootfs (the fake
// driver's files, of which the other CRI tests' images are made, are not
// on a GPU host).
func startGPUCRINode(t *testing.T) *criNode {
	t.Helper()
	n := bootCRINode(t, 0, true)
	n.importImages(gpuRootfs(t, n.imageDir()), map[string][]string{gpuImage: {"/bin/cudamem"}})
	return n
}

// gpuConfig is the container of a GPU pod: the CUDA workload, given GPU
// gpu as a device plugin's Allocate gives it, through the container
// config's Devices, Mounts and Envs, and no other GPU.
func (p *criPod) gpuConfig(t *testing.T, gpu int) *criapi.ContainerConfig {
	t.Helper()
	cfg := p.appConfig(gpuImage)
	cfg.Command = []string{"/bin/cudamem", gpuMiB(), "100"}
	cfg.Devices = nil // the host's nodes below, not the fake driver's stand-in
	for _, dev := range gpuDevices {
		if dev == "/dev/nvidia0" {
			dev = fmt.Sprintf("/dev/nvidia%d", gpu)
		}
		cfg.Devices = append(cfg.Devices, &criapi.Device{ContainerPath: dev, HostPath: dev, Permissions: "rwm"})
	}
	libs := nvidiaLibDir(t)
	for _, name := range []string{"libcuda.so.1", "libnvidia-ptxjitcompiler.so.1"} {
		cfg.Mounts = append(cfg.Mounts, &criapi.Mount{ContainerPath: filepath.Join(criDriverDir, name),
			HostPath: filepath.Join(libs, name), Readonly: true})
	}
	// The rootfs's /usr/lib still serves the workload's own libraries.
	cfg.Envs = []*criapi.KeyValue{{Key: "LD_LIBRARY_PATH", Value: criDriverDir + ":/usr/lib"}}
	return cfg
}

// output is the workload's output: the container's CRI log without each
// line's prefix (time, stream, tag), so that tick lines start the lines
// as tickRe expects.
func (p *criPod) output() string {
	var b strings.Builder
	for _, line := range strings.Split(readFile(p.logPath()), "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			b.WriteString(f[3] + "\n")
		}
	}
	return b.String()
}

// assertOn checks that the container's process holds memory on GPU uuid
// alone. nvidia-smi names processes by their pid on the host.
func (p *criPod) assertOn(t *testing.T, uuid string) {
	t.Helper()
	pid := p.hostPid(t)
	if on := gpusOf(t, pid); len(on) != 1 || on[0] != uuid {
		t.Fatalf("pod %s: its workload (pid %d) runs on %v, want %s", p.name, pid, on, uuid)
	}
}

// hostPid is the pid on the host of the container's process, from its
// task in CRI's containerd namespace.
func (p *criPod) hostPid(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), criNamespace), criCall)
	defer cancel()
	c, err := p.n.client.LoadContainer(ctx, p.container)
	if err != nil {
		t.Fatalf("load container %s: %v", p.container, err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		t.Fatalf("task of %s: %v", p.container, err)
	}
	return int(task.Pid())
}

// TestGPUCRICheckpointPaths times the kubelet's checkpoint of the same GPU
// pod through the two node configurations docs/kubernetes.md compares,
// side by side in one run: the cryo RuntimeClass (containerd gives a
// runtime other than runc.v2 no image path, so the shim writes a
// temporary directory that containerd then packs), and the stock runc
// shim with cryo-runc as its binary (containerd gives runc the image and
// work path). Each pod must run on with CUDA resumed.
func TestGPUCRICheckpointPaths(t *testing.T) {
	uuids := gpuUUIDs(t, 1)
	n := startGPUCRINode(t)
	for _, handler := range []string{criHandler, criCryoRuncHandler} {
		p := n.newPod("gpu-"+handler, handler, nil)
		if err := p.createWith(p.gpuConfig(t, 0)); err != nil {
			t.Fatal(err)
		}
		if err := p.start(); err != nil {
			t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
		}
		waitTicks(t, p.output, 2, "the pod's first ticks ("+handler+")")
		p.assertOn(t, uuids[0])
		before := lastTick(t, p.output())
		archive := filepath.Join(n.dir, "checkpoint-"+handler+".tar")
		report(t, "CRI CheckpointContainer through handler "+handler, p.checkpoint(archive))
		waitTicks(t, p.output, before+2, "ticks after the checkpoint ("+handler+")")
		p.remove()
	}
}
