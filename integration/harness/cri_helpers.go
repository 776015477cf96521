package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The CRI harness: containerd 2.x with its CRI plugin on, a CNI network of
// its own, and a client of k8s.io/cri-api that makes the kubelet's calls
// over containerd's gRPC socket. Nothing of the host's is used but the
// CNI plugin binaries, runc and CRIU.

const (
	CRINamespace   = "k8s.io" // CRI keeps its containers and images there
	CRIHandler     = "cryo"   // the RuntimeClass handler of cryo's runtime
	CRIRuncHandler = "runc"   // the stock runc shim, for comparison
	// CRICryoRuncHandler is the stock runc shim running cryo-runc as its
	// runc binary: the alternative configuration of docs/kubernetes.md.
	CRICryoRuncHandler = "cryo-runc"
	// criPauseImage is the pods' sandbox (pause) image: the test rootfs
	// sleeping, imported, so that no registry is needed.
	criPauseImage = "localhost/cryo/pause:test"
	// criSubnet is the pods' network of node i: private and unlikely to
	// clash with the host's or with containerd's default (10.88.0.0/16).
	criSubnet = "10.233.%d.0/24"
	// CRICall is the deadline of one CRI call: the kubelet's default
	// runtime request timeout, which leaves a GPU container's checkpoint or
	// restore time to move its device memory.
	CRICall = 2 * time.Minute
)

// cniBinDir is where the CNI plugins are: $CRYO_CNI_BIN_DIR (the bundle of
// `make dist` carries its own, for a GPU host without packages) or where
// Debian's containernetworking-plugins installs them.
func cniBinDir() string {
	if d := os.Getenv("CRYO_CNI_BIN_DIR"); d != "" {
		return d
	}
	return "/usr/lib/cni"
}

// CRINode is one "node": a private containerd with CRI, and the clients
// the kubelet would hold.
type CRINode struct {
	*Daemon
	Rt      criapi.RuntimeServiceClient
	images  criapi.ImageServiceClient
	conn    *grpc.ClientConn
	network string // CNI network name, per test process
	bridge  string // its Linux bridge (at most 15 characters)
	Cgroup  string // the pods' cgroup parent
	Subnet  string // the pods' addresses
	// noCryo: the configuration lacks cryo's runtime handler, which an
	// installer adds (TestKubeletHelm).
	NoCryo bool
}

// StartCRINode starts containerd 2.x with CRI and CNI in a temporary
// directory, waits until CRI reports the runtime and the network ready,
// and imports the test and pause images into CRI's namespace.
func StartCRINode(t testing.TB) *CRINode {
	t.Helper()
	return StartCRINodeAt(t, 0)
}

// StartCRINodeAt starts node i of a test: each node of one test process
// has its own CNI network, bridge, subnet and cgroup parent, so that two
// "nodes" run side by side on one machine.
func StartCRINodeAt(t testing.TB, i int) *CRINode {
	t.Helper()
	n := BootCRINode(t, i, false)
	n.ImportImages(NewRootfs(n.T, n.ImageDir()), map[string][]string{TestImage: {"/bin/fakecuda-app", "100"}})
	return n
}

// BootCRINode starts node i without images. gpu: the node's shims use the
// host's NVIDIA driver rather than the fake one.
func BootCRINode(t testing.TB, i int, gpu bool) *CRINode {
	t.Helper()
	return BootCRINodeWith(t, i, gpu, nil)
}

// BootCRINodeWith is BootCRINode with edit applied to the node before its
// containerd starts.
func BootCRINodeWith(t testing.TB, i int, gpu bool, edit func(*CRINode)) *CRINode {
	t.Helper()
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir(), p)); err != nil {
			t.Fatalf("CNI plugin %s missing (%v): run `make deps` (Debian package containernetworking-plugins) or set CRYO_CNI_BIN_DIR", p, err)
		}
	}
	pid := os.Getpid()
	n := &CRINode{Daemon: NewDaemon(t, CtrdVersions[1], gpu),
		network: fmt.Sprintf("cryo-cri-%d-%d", pid, i), bridge: fmt.Sprintf("cryocri%d%d", pid%100000, i),
		Cgroup: fmt.Sprintf("/cryo-cri-%d-%d", pid, i), Subnet: fmt.Sprintf(criSubnet, 247-i)}
	if edit != nil {
		edit(n)
	}
	n.writeCNIConfig()
	n.CRI = n.criConfig()
	n.Start()
	t.Cleanup(n.cleanup) // before the daemon's stop: cleanups run last first
	n.connect()
	n.waitReady()
	return n
}

// criConfig is the CRI plugin's part of containerd's config.toml (schema 3).
// restrict_oom_score_adj: runc cannot lower a sandbox's oom_score_adj in a
// VM whose root has a raised one. netns_mounts_under_state_dir keeps the
// pods' network namespaces under the temporary directory. containerd adds
// the loopback network itself (the loopback plugin must be in bin_dirs).
// pod_annotations lets the cryo shim see a pod's cryo.io/* annotations
// (cryo.io/checkpoint-image), as docs/kubernetes.md tells users to set.
func (n *CRINode) criConfig() string {
	cfg := n.criConfigAll()
	if n.NoCryo {
		cryo := fmt.Sprintf("    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%s]\n      runtime_type = %q\n      pod_annotations = ['cryo.io/*']\n", CRIHandler, CryoRuntime)
		cfg = strings.Replace(cfg, cryo, "", 1)
	}
	return cfg
}

func (n *CRINode) criConfigAll() string {
	return fmt.Sprintf(`[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = %[1]q
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[1]s]
      runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[2]s]
      runtime_type = %[3]q
      pod_annotations = ['cryo.io/*']
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[7]s]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[7]s.options]
        BinaryName = %[8]q
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[4]q]
    conf_dir = %[5]q
    max_conf_num = 1
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %[6]q
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`, CRIRuncHandler, CRIHandler, CryoRuntime, cniBinDir(), n.cniConfDir(), criPauseImage,
		CRICryoRuncHandler, filepath.Join(BinDir(), "cryo-runc"))
}

func (n *CRINode) cniConfDir() string { return filepath.Join(n.Dir, "cni", "net.d") }

// writeCNIConfig writes a bridge network with host-local addresses whose
// allocations stay in the temporary directory, without masquerading: the
// pods need no way out, so the host's iptables stay untouched.
func (n *CRINode) writeCNIConfig() {
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": n.network,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": n.bridge, "isGateway": true, "ipMasq": false,
			"ipam": map[string]any{
				"type": "host-local", "ranges": [][]map[string]string{{{"subnet": n.Subnet}}},
				"dataDir": filepath.Join(n.Dir, "cni", "ipam"),
			},
		}},
	}
	if err := os.MkdirAll(n.cniConfDir(), 0o755); err != nil {
		n.T.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.cniConfDir(), "10-cryo.conflist"), MustJSON(n.T, conf), 0o644); err != nil {
		n.T.Fatal(err)
	}
}

func (n *CRINode) connect() {
	conn, err := grpc.NewClient("unix://"+n.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.T.Fatalf("CRI: connect to %s: %v", n.Socket, err)
	}
	n.conn, n.Rt, n.images = conn, criapi.NewRuntimeServiceClient(conn), criapi.NewImageServiceClient(conn)
}

// waitReady waits until CRI's Status reports RuntimeReady and
// NetworkReady, as the kubelet does before it schedules pods. Other
// conditions (containerd 2.2 adds ContainerdHasNoDeprecationWarnings) do
// not stop a node from running pods.
func (n *CRINode) waitReady() {
	n.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		var ready bool
		if ready, last = n.ready(); ready {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.T.Fatalf("CRI not ready after 30s: %s\n%s", last, LastLines(n.Log(), 20))
}

// ready asks CRI's Status once; it returns the conditions seen, for a failure.
func (n *CRINode) ready() (bool, string) {
	ctx, cancel := n.Ctx()
	defer cancel()
	st, err := n.Rt.Status(ctx, &criapi.StatusRequest{})
	if err != nil {
		return false, err.Error()
	}
	var seen []string
	want := map[string]bool{criapi.RuntimeReady: false, criapi.NetworkReady: false}
	for _, c := range st.GetStatus().GetConditions() {
		seen = append(seen, fmt.Sprintf("%s=%v %s", c.Type, c.Status, c.Message))
		if _, ok := want[c.Type]; ok {
			want[c.Type] = c.Status
		}
	}
	return want[criapi.RuntimeReady] && want[criapi.NetworkReady], strings.Join(seen, "; ")
}

// imageDir is where a node's images are built.
func (n *CRINode) ImageDir() string { return filepath.Join(n.Dir, "image") }

// importImages makes an image of rootfs for each name of cmds (running its
// command), and the pause image of the same rootfs, and imports them into
// CRI's namespace with ctr, as `ctr -n k8s.io images import` would on a
// node without a registry. CRI sees them through containerd's image events.
func (n *CRINode) ImportImages(rootfs string, cmds map[string][]string) {
	n.T.Helper()
	all := map[string][]string{criPauseImage: {"/bin/sleep", "2147483647"}}
	for name, cmd := range cmds {
		all[name] = cmd
	}
	for name, cmd := range all {
		archive := filepath.Join(n.ImageDir(), strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
		BuildImageTarAs(n.T, rootfs, archive, name, cmd)
		n.CtrIn(CRINamespace, "images", "import", "--all-platforms", archive)
	}
	WaitFor(n.T, 10*time.Second, "CRI to list the imported images", func() bool {
		for name := range all {
			if !n.ImageKnown(name) {
				return false
			}
		}
		return true
	})
}

func (n *CRINode) ImageKnown(ref string) bool {
	ctx, cancel := n.Ctx()
	defer cancel()
	st, err := n.images.ImageStatus(ctx, &criapi.ImageStatusRequest{Image: &criapi.ImageSpec{Image: ref}})
	return err == nil && st.GetImage() != nil
}

// ctrIn runs ctr against the daemon in a namespace other than the tests'.
func (n *CRINode) CtrIn(ns string, args ...string) string {
	n.T.Helper()
	full := append([]string{"--address", n.Socket, "--namespace", ns}, args...)
	out, err := RunErr(2*time.Minute, n.Env(), filepath.Join(n.Bin, "ctr"), full...)
	if err != nil {
		n.T.Fatalf("ctr -n %s %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

func (n *CRINode) Ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), CRICall)
}

// cleanup stops and removes every pod as the kubelet would (CNI DEL
// releases the addresses and the network namespace), then removes what
// CNI and the cgroup driver leave on the host: the bridge, libcni's result
// cache and the pods' cgroup parent. The daemon's own stop follows.
func (n *CRINode) cleanup() {
	if n.conn != nil {
		n.removeAllPods()
		n.conn.Close()
	}
	_, _ = RunErr(10*time.Second, nil, "ip", "link", "del", n.bridge)
	cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", n.network+"-*"))
	for _, f := range cached {
		_ = os.Remove(f)
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", n.Cgroup))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup/unified", n.Cgroup))
	for _, d := range dirs {
		_ = os.Remove(d) // empty once the pods are gone; rmdir is how cgroups go
	}
}

func (n *CRINode) removeAllPods() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*CRICall)
	defer cancel()
	pods, err := n.Rt.ListPodSandbox(ctx, &criapi.ListPodSandboxRequest{})
	if err != nil {
		n.T.Logf("CRI cleanup: list pods: %v", err)
		return
	}
	for _, p := range pods.GetItems() {
		if _, err := n.Rt.StopPodSandbox(ctx, &criapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			n.T.Logf("CRI cleanup: stop pod %s: %v", p.Id, err)
		}
		if _, err := n.Rt.RemovePodSandbox(ctx, &criapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			n.T.Logf("CRI cleanup: remove pod %s: %v", p.Id, err)
		}
	}
}

// copiesCRIUStats reports whether this containerd's CRI plugin copies
// CRIU's stats-dump and dump.log from the container's directory into the
// archive (2.2 and later; 2.1 does not).
func (n *CRINode) CopiesCRIUStats() bool {
	ctx, cancel := n.Ctx()
	defer cancel()
	v, err := n.Client.Version(ctx)
	if err != nil {
		n.T.Fatalf("containerd version: %v", err)
	}
	var major, minor int
	fmt.Sscanf(strings.TrimPrefix(v.Version, "v"), "%d.%d", &major, &minor)
	return major > 2 || major == 2 && minor >= 2
}
