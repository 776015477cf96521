package harness

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRIPod is one pod sandbox with one container, made by the kubelet's
// calls: RunPodSandbox, CreateContainer, StartContainer.
type CRIPod struct {
	N         *CRINode
	Name      string
	ID        string // the sandbox's id
	Container string // the container's id
	logDir    string
	cfg       *criapi.PodSandboxConfig
}

// runPod runs a pod named name under a runtime handler (its RuntimeClass)
// with one container, "app", running fakecuda-app (a tick every 100 ms),
// and waits for its first ticks.
func (n *CRINode) RunPod(name, handler string) *CRIPod {
	n.T.Helper()
	return n.RunPodOf(name, handler, TestImage)
}

// runPodOf is runPod with the container's image named.
func (n *CRINode) RunPodOf(name, handler, image string) *CRIPod {
	n.T.Helper()
	p := n.NewPod(name, handler, nil)
	if err := p.Create(image); err != nil {
		n.T.Fatal(err)
	}
	if err := p.Start(); err != nil {
		n.T.Fatal(err)
	}
	n.WaitTicksIn(p.LogPath(), 3)
	return p
}

// newPod runs a pod sandbox with the pod annotations ann, as the kubelet
// does for a pod before its containers.
func (n *CRINode) NewPod(name, handler string, ann map[string]string) *CRIPod {
	n.T.Helper()
	p := &CRIPod{N: n, Name: name, logDir: filepath.Join(n.Dir, "pods", name)}
	p.cfg = p.sandboxConfig()
	p.cfg.Annotations = ann
	ctx, cancel := n.Ctx()
	defer cancel()
	sb, err := n.Rt.RunPodSandbox(ctx, &criapi.RunPodSandboxRequest{Config: p.cfg, RuntimeHandler: handler})
	if err != nil {
		n.T.Fatalf("RunPodSandbox %s (handler %s): %v\n%s", name, handler, err, LastLines(n.Log(), 30))
	}
	p.ID = sb.PodSandboxId
	return p
}

// create makes the pod's container "app" from image: the app's ordinary
// image, or for containerd's own CRI restore a checkpoint archive's path
// or a checkpoint image.
func (p *CRIPod) Create(image string) error {
	return p.CreateWith(p.AppConfig(image))
}

// createWith makes the pod's container from a container config of its own.
func (p *CRIPod) CreateWith(cfg *criapi.ContainerConfig) error {
	ctx, cancel := p.N.Ctx()
	defer cancel()
	c, err := p.N.Rt.CreateContainer(ctx, &criapi.CreateContainerRequest{PodSandboxId: p.ID, Config: cfg, SandboxConfig: p.cfg})
	if err != nil {
		return fmt.Errorf("CreateContainer %s in pod %s: %w\n%s", cfg.GetImage().GetImage(), p.Name, err, LastLines(p.N.Log(), 30))
	}
	p.Container = c.ContainerId
	return nil
}

// start starts the container, as the kubelet does after CreateContainer.
func (p *CRIPod) Start() error {
	ctx, cancel := p.N.Ctx()
	defer cancel()
	if _, err := p.N.Rt.StartContainer(ctx, &criapi.StartContainerRequest{ContainerId: p.Container}); err != nil {
		return fmt.Errorf("StartContainer %s in pod %s: %w", p.Container, p.Name, err)
	}
	return nil
}

// sandboxConfig is what the kubelet sends for a pod: metadata, a log
// directory, a hostname, and a cgroup parent (cgroupfs driver) that the
// cleanup can remove.
func (p *CRIPod) sandboxConfig() *criapi.PodSandboxConfig {
	return &criapi.PodSandboxConfig{
		Metadata:     &criapi.PodSandboxMetadata{Name: p.Name, Namespace: "default", Uid: p.Name + "-uid"},
		Hostname:     p.Name,
		LogDirectory: p.logDir,
		Linux: &criapi.LinuxPodSandboxConfig{CgroupParent: p.N.Cgroup,
			SecurityContext: &criapi.LinuxSandboxSecurityContext{NamespaceOptions: KubeletNamespaces()}},
	}
}

// KubeletNamespaces are the kubelet's defaults for a pod without host
// namespaces or a shared process namespace: the pod's network and IPC, a
// pid namespace per container. (CRI's zero value would share the pod's pid
// namespace, with the pause process as pid 1.)
func KubeletNamespaces() *criapi.NamespaceOption {
	return &criapi.NamespaceOption{Network: criapi.NamespaceMode_POD, Pid: criapi.NamespaceMode_CONTAINER, Ipc: criapi.NamespaceMode_POD}
}

// appConfig is the container "app" of image running fakecuda-app, given
// GPU 0's stand-in node as a device plugin's Allocate gives a GPU.
func (p *CRIPod) AppConfig(image string) *criapi.ContainerConfig {
	return &criapi.ContainerConfig{
		Metadata: &criapi.ContainerMetadata{Name: "app"},
		Image:    &criapi.ImageSpec{Image: image},
		Command:  []string{"/bin/fakecuda-app", "100"},
		LogPath:  "app.log",
		Devices:  []*criapi.Device{criStandIn()},
		Linux: &criapi.LinuxContainerConfig{
			SecurityContext: WithKubeletPaths(&criapi.LinuxContainerSecurityContext{NamespaceOptions: KubeletNamespaces()})},
	}
}

// WithKubeletPaths adds the masked and read-only paths that the kubelet
// sends for every container that is not privileged (k8s.io/kubernetes
// pkg/securitycontext, the Default proc mount). A harness that sent none
// would make containerd mask nothing, which no real pod gets.
func WithKubeletPaths(sc *criapi.LinuxContainerSecurityContext) *criapi.LinuxContainerSecurityContext {
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
func (p *CRIPod) LogPath() string { return filepath.Join(p.logDir, "app.log") }

// status is the container's CRI status.
func (p *CRIPod) Status() *criapi.ContainerStatus {
	p.N.T.Helper()
	ctx, cancel := p.N.Ctx()
	defer cancel()
	st, err := p.N.Rt.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: p.Container})
	if err != nil {
		p.N.T.Fatalf("ContainerStatus %s: %v", p.Container, err)
	}
	return st.GetStatus()
}

// checkpoint asks CRI for a checkpoint archive of the container at
// location, as the kubelet's checkpoint API does, and returns how long it took.
func (p *CRIPod) Checkpoint(location string) time.Duration {
	p.N.T.Helper()
	ctx, cancel := p.N.Ctx()
	defer cancel()
	start := time.Now()
	_, err := p.N.Rt.CheckpointContainer(ctx, &criapi.CheckpointContainerRequest{ContainerId: p.Container, Location: location, Timeout: int64(CRICall / time.Second)})
	if err != nil {
		p.N.T.Fatalf("CheckpointContainer %s: %v\n%s", p.Container, err, LastLines(p.N.Log(), 40))
	}
	return time.Since(start)
}

// remove stops and removes the pod, as the kubelet does when a pod goes.
func (p *CRIPod) Remove() {
	p.N.T.Helper()
	ctx, cancel := p.N.Ctx()
	defer cancel()
	if _, err := p.N.Rt.StopPodSandbox(ctx, &criapi.StopPodSandboxRequest{PodSandboxId: p.ID}); err != nil {
		p.N.T.Fatalf("StopPodSandbox %s: %v", p.Name, err)
	}
	if _, err := p.N.Rt.RemovePodSandbox(ctx, &criapi.RemovePodSandboxRequest{PodSandboxId: p.ID}); err != nil {
		p.N.T.Fatalf("RemovePodSandbox %s: %v", p.Name, err)
	}
}

// ArchiveFiles lists a checkpoint archive's regular files with their sizes.
func ArchiveFiles(t testing.TB, path string) map[string]int64 {
	t.Helper()
	files := map[string]int64{}
	ReadArchive(t, path, func(hdr *tar.Header, _ io.Reader) {
		if hdr.Typeflag == tar.TypeReg {
			files[filepath.Clean(hdr.Name)] = hdr.Size
		}
	})
	return files
}

// ReadArchive calls fn for every entry of an uncompressed tar.
func ReadArchive(t testing.TB, path string, fn func(*tar.Header, io.Reader)) {
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
func (p *CRIPod) Exec(cmd ...string) string {
	p.N.T.Helper()
	ctx, cancel := p.N.Ctx()
	defer cancel()
	r, err := p.N.Rt.ExecSync(ctx, &criapi.ExecSyncRequest{ContainerId: p.Container, Cmd: cmd, Timeout: 10})
	if err != nil || r.ExitCode != 0 {
		p.N.T.Fatalf("ExecSync %v in %s: %v (exit %d)\n%s", cmd, p.Name, err, r.GetExitCode(), r.GetStderr())
	}
	return string(r.Stdout)
}
