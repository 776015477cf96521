package integration

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
	criNamespace   = "k8s.io" // CRI keeps its containers and images there
	criHandler     = "cryo"   // the RuntimeClass handler of cryo's runtime
	criRuncHandler = "runc"   // the stock runc shim, for comparison
	// criCryoRuncHandler is the stock runc shim running cryo-runc as its
	// runc binary: the alternative configuration of docs/kubernetes.md.
	criCryoRuncHandler = "cryo-runc"
	// criPauseImage is the pods' sandbox (pause) image: the test rootfs
	// sleeping, imported, so that no registry is needed.
	criPauseImage = "localhost/cryo/pause:test"
	// criSubnet is the pods' network of node i: private and unlikely to
	// clash with the host's or with containerd's default (10.88.0.0/16).
	criSubnet = "10.233.%d.0/24"
	// criCall is the deadline of one CRI call: the kubelet's default
	// runtime request timeout, which leaves a GPU container's checkpoint or
	// restore time to move its device memory.
	criCall = 2 * time.Minute
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

// criNode is one "node": a private containerd with CRI, and the clients
// the kubelet would hold.
type criNode struct {
	*daemon
	rt      criapi.RuntimeServiceClient
	images  criapi.ImageServiceClient
	conn    *grpc.ClientConn
	network string // CNI network name, per test process
	bridge  string // its Linux bridge (at most 15 characters)
	cgroup  string // the pods' cgroup parent
	subnet  string // the pods' addresses
	// noCryo: the configuration lacks cryo's runtime handler, which an
	// installer adds (TestKubeletHelm).
	noCryo bool
}

// startCRINode starts containerd 2.x with CRI and CNI in a temporary
// directory, waits until CRI reports the runtime and the network ready,
// and imports the test and pause images into CRI's namespace.
func startCRINode(t testing.TB) *criNode {
	t.Helper()
	return startCRINodeAt(t, 0)
}

// startCRINodeAt starts node i of a test: each node of one test process
// has its own CNI network, bridge, subnet and cgroup parent, so that two
// "nodes" run side by side on one machine.
func startCRINodeAt(t testing.TB, i int) *criNode {
	t.Helper()
	n := bootCRINode(t, i, false)
	n.importImages(newRootfs(n.t, n.imageDir()), map[string][]string{testImage: {"/bin/fakecuda-app", "100"}})
	return n
}

// bootCRINode starts node i without images. gpu: the node's shims use the
// host's NVIDIA driver rather than the fake one.
func bootCRINode(t testing.TB, i int, gpu bool) *criNode {
	t.Helper()
	return bootCRINodeWith(t, i, gpu, nil)
}

// bootCRINodeWith is bootCRINode with edit applied to the node before its
// containerd starts.
func bootCRINodeWith(t testing.TB, i int, gpu bool, edit func(*criNode)) *criNode {
	t.Helper()
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir(), p)); err != nil {
			t.Fatalf("CNI plugin %s missing (%v): run `make deps` (Debian package containernetworking-plugins) or set CRYO_CNI_BIN_DIR", p, err)
		}
	}
	pid := os.Getpid()
	n := &criNode{daemon: newDaemon(t, ctrdVersions[1], gpu),
		network: fmt.Sprintf("cryo-cri-%d-%d", pid, i), bridge: fmt.Sprintf("cryocri%d%d", pid%100000, i),
		cgroup: fmt.Sprintf("/cryo-cri-%d-%d", pid, i), subnet: fmt.Sprintf(criSubnet, 247-i)}
	if edit != nil {
		edit(n)
	}
	n.writeCNIConfig()
	n.cri = n.criConfig()
	n.start()
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
func (n *criNode) criConfig() string {
	cfg := n.criConfigAll()
	if n.noCryo {
		cryo := fmt.Sprintf("    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%s]\n      runtime_type = %q\n      pod_annotations = ['cryo.io/*']\n", criHandler, cryoRuntime)
		cfg = strings.Replace(cfg, cryo, "", 1)
	}
	return cfg
}

func (n *criNode) criConfigAll() string {
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
`, criRuncHandler, criHandler, cryoRuntime, cniBinDir(), n.cniConfDir(), criPauseImage,
		criCryoRuncHandler, filepath.Join(binDir(), "cryo-runc"))
}

func (n *criNode) cniConfDir() string { return filepath.Join(n.dir, "cni", "net.d") }

// writeCNIConfig writes a bridge network with host-local addresses whose
// allocations stay in the temporary directory, without masquerading: the
// pods need no way out, so the host's iptables stay untouched.
func (n *criNode) writeCNIConfig() {
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": n.network,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": n.bridge, "isGateway": true, "ipMasq": false,
			"ipam": map[string]any{
				"type": "host-local", "ranges": [][]map[string]string{{{"subnet": n.subnet}}},
				"dataDir": filepath.Join(n.dir, "cni", "ipam"),
			},
		}},
	}
	if err := os.MkdirAll(n.cniConfDir(), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.cniConfDir(), "10-cryo.conflist"), mustJSON(n.t, conf), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *criNode) connect() {
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatalf("CRI: connect to %s: %v", n.socket, err)
	}
	n.conn, n.rt, n.images = conn, criapi.NewRuntimeServiceClient(conn), criapi.NewImageServiceClient(conn)
}

// waitReady waits until CRI's Status reports RuntimeReady and
// NetworkReady, as the kubelet does before it schedules pods. Other
// conditions (containerd 2.2 adds ContainerdHasNoDeprecationWarnings) do
// not stop a node from running pods.
func (n *criNode) waitReady() {
	n.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		var ready bool
		if ready, last = n.ready(); ready {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.t.Fatalf("CRI not ready after 30s: %s\n%s", last, lastLines(n.log(), 20))
}

// ready asks CRI's Status once; it returns the conditions seen, for a failure.
func (n *criNode) ready() (bool, string) {
	ctx, cancel := n.ctx()
	defer cancel()
	st, err := n.rt.Status(ctx, &criapi.StatusRequest{})
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
func (n *criNode) imageDir() string { return filepath.Join(n.dir, "image") }

// importImages makes an image of rootfs for each name of cmds (running its
// command), and the pause image of the same rootfs, and imports them into
// CRI's namespace with ctr, as `ctr -n k8s.io images import` would on a
// node without a registry. CRI sees them through containerd's image events.
func (n *criNode) importImages(rootfs string, cmds map[string][]string) {
	n.t.Helper()
	all := map[string][]string{criPauseImage: {"/bin/sleep", "2147483647"}}
	for name, cmd := range cmds {
		all[name] = cmd
	}
	for name, cmd := range all {
		archive := filepath.Join(n.imageDir(), strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
		buildImageTarAs(n.t, rootfs, archive, name, cmd)
		n.ctrIn(criNamespace, "images", "import", "--all-platforms", archive)
	}
	waitFor(n.t, 10*time.Second, "CRI to list the imported images", func() bool {
		for name := range all {
			if !n.imageKnown(name) {
				return false
			}
		}
		return true
	})
}

func (n *criNode) imageKnown(ref string) bool {
	ctx, cancel := n.ctx()
	defer cancel()
	st, err := n.images.ImageStatus(ctx, &criapi.ImageStatusRequest{Image: &criapi.ImageSpec{Image: ref}})
	return err == nil && st.GetImage() != nil
}

// ctrIn runs ctr against the daemon in a namespace other than the tests'.
func (n *criNode) ctrIn(ns string, args ...string) string {
	n.t.Helper()
	full := append([]string{"--address", n.socket, "--namespace", ns}, args...)
	out, err := runErr(2*time.Minute, n.env(), filepath.Join(n.bin, "ctr"), full...)
	if err != nil {
		n.t.Fatalf("ctr -n %s %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

func (n *criNode) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), criCall)
}

// cleanup stops and removes every pod as the kubelet would (CNI DEL
// releases the addresses and the network namespace), then removes what
// CNI and the cgroup driver leave on the host: the bridge, libcni's result
// cache and the pods' cgroup parent. The daemon's own stop follows.
func (n *criNode) cleanup() {
	if n.conn != nil {
		n.removeAllPods()
		n.conn.Close()
	}
	_, _ = runErr(10*time.Second, nil, "ip", "link", "del", n.bridge)
	cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", n.network+"-*"))
	for _, f := range cached {
		_ = os.Remove(f)
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", n.cgroup))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup/unified", n.cgroup))
	for _, d := range dirs {
		_ = os.Remove(d) // empty once the pods are gone; rmdir is how cgroups go
	}
}

func (n *criNode) removeAllPods() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*criCall)
	defer cancel()
	pods, err := n.rt.ListPodSandbox(ctx, &criapi.ListPodSandboxRequest{})
	if err != nil {
		n.t.Logf("CRI cleanup: list pods: %v", err)
		return
	}
	for _, p := range pods.GetItems() {
		if _, err := n.rt.StopPodSandbox(ctx, &criapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			n.t.Logf("CRI cleanup: stop pod %s: %v", p.Id, err)
		}
		if _, err := n.rt.RemovePodSandbox(ctx, &criapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			n.t.Logf("CRI cleanup: remove pod %s: %v", p.Id, err)
		}
	}
}

// copiesCRIUStats reports whether this containerd's CRI plugin copies
// CRIU's stats-dump and dump.log from the container's directory into the
// archive (2.2 and later; 2.1 does not).
func (n *criNode) copiesCRIUStats() bool {
	ctx, cancel := n.ctx()
	defer cancel()
	v, err := n.client.Version(ctx)
	if err != nil {
		n.t.Fatalf("containerd version: %v", err)
	}
	var major, minor int
	fmt.Sscanf(strings.TrimPrefix(v.Version, "v"), "%d.%d", &major, &minor)
	return major > 2 || major == 2 && minor >= 2
}
