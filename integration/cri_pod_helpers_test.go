package integration

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// criPod is one pod sandbox with one container, made by the kubelet's
// calls: RunPodSandbox, CreateContainer, StartContainer.
type criPod struct {
	n         *criNode
	name      string
	id        string // the sandbox's id
	container string // the container's id
	logDir    string
	cfg       *criapi.PodSandboxConfig
}

// runPod runs a pod named name under a runtime handler (its RuntimeClass)
// with one container, "app", running fakecuda-app (a tick every 100 ms),
// and waits for its first ticks.
func (n *criNode) runPod(name, handler string) *criPod {
	n.t.Helper()
	return n.runPodOf(name, handler, testImage)
}

// runPodOf is runPod with the container's image named.
func (n *criNode) runPodOf(name, handler, image string) *criPod {
	n.t.Helper()
	p := n.newPod(name, handler, nil)
	if err := p.create(image); err != nil {
		n.t.Fatal(err)
	}
	if err := p.start(); err != nil {
		n.t.Fatal(err)
	}
	n.waitTicksIn(p.logPath(), 3)
	return p
}

// newPod runs a pod sandbox with the pod annotations ann, as the kubelet
// does for a pod before its containers.
func (n *criNode) newPod(name, handler string, ann map[string]string) *criPod {
	n.t.Helper()
	p := &criPod{n: n, name: name, logDir: filepath.Join(n.dir, "pods", name)}
	p.cfg = p.sandboxConfig()
	p.cfg.Annotations = ann
	ctx, cancel := n.ctx()
	defer cancel()
	sb, err := n.rt.RunPodSandbox(ctx, &criapi.RunPodSandboxRequest{Config: p.cfg, RuntimeHandler: handler})
	if err != nil {
		n.t.Fatalf("RunPodSandbox %s (handler %s): %v\n%s", name, handler, err, lastLines(n.log(), 30))
	}
	p.id = sb.PodSandboxId
	return p
}

// create makes the pod's container "app" from image: the app's ordinary
// image, or for containerd's own CRI restore a checkpoint archive's path
// or a checkpoint image.
func (p *criPod) create(image string) error {
	return p.createWith(p.appConfig(image))
}

// createWith makes the pod's container from a container config of its own.
func (p *criPod) createWith(cfg *criapi.ContainerConfig) error {
	ctx, cancel := p.n.ctx()
	defer cancel()
	c, err := p.n.rt.CreateContainer(ctx, &criapi.CreateContainerRequest{PodSandboxId: p.id, Config: cfg, SandboxConfig: p.cfg})
	if err != nil {
		return fmt.Errorf("CreateContainer %s in pod %s: %w\n%s", cfg.GetImage().GetImage(), p.name, err, lastLines(p.n.log(), 30))
	}
	p.container = c.ContainerId
	return nil
}

// start starts the container, as the kubelet does after CreateContainer.
func (p *criPod) start() error {
	ctx, cancel := p.n.ctx()
	defer cancel()
	if _, err := p.n.rt.StartContainer(ctx, &criapi.StartContainerRequest{ContainerId: p.container}); err != nil {
		return fmt.Errorf("StartContainer %s in pod %s: %w", p.container, p.name, err)
	}
	return nil
}

// sandboxConfig is what the kubelet sends for a pod: metadata, a log
// directory, a hostname, and a cgroup parent (cgroupfs driver) that the
// cleanup can remove.
func (p *criPod) sandboxConfig() *criapi.PodSandboxConfig {
	return &criapi.PodSandboxConfig{
		Metadata:     &criapi.PodSandboxMetadata{Name: p.name, Namespace: "default", Uid: p.name + "-uid"},
		Hostname:     p.name,
		LogDirectory: p.logDir,
		Linux: &criapi.LinuxPodSandboxConfig{CgroupParent: p.n.cgroup,
			SecurityContext: &criapi.LinuxSandboxSecurityContext{NamespaceOptions: kubeletNamespaces()}},
	}
}

// kubeletNamespaces are the kubelet's defaults for a pod without host
// namespaces or a shared process namespace: the pod's network and IPC, a
// pid namespace per container. (CRI's zero value would share the pod's pid
// namespace, with the pause process as pid 1.)
func kubeletNamespaces() *criapi.NamespaceOption {
	return &criapi.NamespaceOption{Network: criapi.NamespaceMode_POD, Pid: criapi.NamespaceMode_CONTAINER, Ipc: criapi.NamespaceMode_POD}
}

// appConfig is the container "app" of image running fakecuda-app, given
// GPU 0's stand-in node as a device plugin's Allocate gives a GPU.
func (p *criPod) appConfig(image string) *criapi.ContainerConfig {
	return &criapi.ContainerConfig{
		Metadata: &criapi.ContainerMetadata{Name: "app"},
		Image:    &criapi.ImageSpec{Image: image},
		Command:  []string{"/bin/fakecuda-app", "100"},
		LogPath:  "app.log",
		Devices:  []*criapi.Device{criStandIn()},
		Linux: &criapi.LinuxContainerConfig{
			SecurityContext: withKubeletPaths(&criapi.LinuxContainerSecurityContext{NamespaceOptions: kubeletNamespaces()})},
	}
}

// withKubeletPaths adds the masked and read-only paths that the kubelet
// sends for every container that is not privileged (k8s.io/kubernetes
// pkg/securitycontext, the Default proc mount). A harness that sent none
// would make containerd mask nothing, which no real pod gets.
func withKubeletPaths(sc *criapi.LinuxContainerSecurityContext) *criapi.LinuxContainerSecurityContext {
	if sc.Privileged {
		sc.MaskedPaths, sc.ReadonlyPaths = nil, nil
		return sc
	}
	sc.MaskedPaths = kubeletMaskedPaths()
	sc.ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	return sc
}

// kubeletMaskedPaths is the kubelet's defaultMaskedPaths (v1.37): a fixed
// list, and each CPU's thermal_throttle directory where the host has one.
func kubeletMaskedPaths() []string {
	paths := []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
	cpus, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle")
	return append(paths, cpus...)
}

// logPath is the container's log, in CRI's format (time, stream, tag,
// line); the tick lines are found inside it.
func (p *criPod) logPath() string { return filepath.Join(p.logDir, "app.log") }

// status is the container's CRI status.
func (p *criPod) status() *criapi.ContainerStatus {
	p.n.t.Helper()
	ctx, cancel := p.n.ctx()
	defer cancel()
	st, err := p.n.rt.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: p.container})
	if err != nil {
		p.n.t.Fatalf("ContainerStatus %s: %v", p.container, err)
	}
	return st.GetStatus()
}

// checkpoint asks CRI for a checkpoint archive of the container at
// location, as the kubelet's checkpoint API does, and returns how long it took.
func (p *criPod) checkpoint(location string) time.Duration {
	p.n.t.Helper()
	ctx, cancel := p.n.ctx()
	defer cancel()
	start := time.Now()
	_, err := p.n.rt.CheckpointContainer(ctx, &criapi.CheckpointContainerRequest{ContainerId: p.container, Location: location, Timeout: int64(criCall / time.Second)})
	if err != nil {
		p.n.t.Fatalf("CheckpointContainer %s: %v\n%s", p.container, err, lastLines(p.n.log(), 40))
	}
	return time.Since(start)
}

// remove stops and removes the pod, as the kubelet does when a pod goes.
func (p *criPod) remove() {
	p.n.t.Helper()
	ctx, cancel := p.n.ctx()
	defer cancel()
	if _, err := p.n.rt.StopPodSandbox(ctx, &criapi.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
		p.n.t.Fatalf("StopPodSandbox %s: %v", p.name, err)
	}
	if _, err := p.n.rt.RemovePodSandbox(ctx, &criapi.RemovePodSandboxRequest{PodSandboxId: p.id}); err != nil {
		p.n.t.Fatalf("RemovePodSandbox %s: %v", p.name, err)
	}
}

// archiveFiles lists a checkpoint archive's regular files with their sizes.
func archiveFiles(t testing.TB, path string) map[string]int64 {
	t.Helper()
	files := map[string]int64{}
	readArchive(t, path, func(hdr *tar.Header, _ io.Reader) {
		if hdr.Typeflag == tar.TypeReg {
			files[filepath.Clean(hdr.Name)] = hdr.Size
		}
	})
	return files
}

// archiveManifest decodes cryo's GPU manifest from a checkpoint archive.
func archiveManifest(t testing.TB, path string) *manifest.Manifest {
	t.Helper()
	var m *manifest.Manifest
	readArchive(t, path, func(hdr *tar.Header, r io.Reader) {
		if filepath.Base(hdr.Name) != manifest.ManifestName {
			return
		}
		m = new(manifest.Manifest)
		if err := json.NewDecoder(r).Decode(m); err != nil {
			t.Fatalf("%s: %s: %v", path, hdr.Name, err)
		}
	})
	if m == nil {
		t.Fatalf("%s holds no %s", path, manifest.ManifestName)
	}
	return m
}

// readArchive calls fn for every entry of an uncompressed tar.
func readArchive(t testing.TB, path string, fn func(*tar.Header, io.Reader)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		fn(hdr, tr)
	}
}

// exec runs cmd in the container with CRI's ExecSync (kubectl exec) and
// returns its output; a failure fails the test.
func (p *criPod) exec(cmd ...string) string {
	p.n.t.Helper()
	ctx, cancel := p.n.ctx()
	defer cancel()
	r, err := p.n.rt.ExecSync(ctx, &criapi.ExecSyncRequest{ContainerId: p.container, Cmd: cmd, Timeout: 10})
	if err != nil || r.ExitCode != 0 {
		p.n.t.Fatalf("ExecSync %v in %s: %v (exit %d)\n%s", cmd, p.name, err, r.GetExitCode(), r.GetStderr())
	}
	return string(r.Stdout)
}
