package integration

// A restore into a pod takes its rights from the pod's spec, never from the
// checkpoint: through containerd 2.x's CRI, as a kubelet drives it, a
// checkpoint of a privileged pod or of a hostNetwork pod is refused by a
// pod under the restricted profile, and a restricted pod restored into its
// own spec comes back with exactly that spec's uid, capabilities, seccomp,
// no_new_privs, namespaces and cgroup.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// restrictedCtx is what the restricted PodSecurity profile makes the
// kubelet send: a non-root uid, every capability dropped, the runtime's
// default seccomp profile and no privilege escalation.
func restrictedCtx(uid int64) *criapi.LinuxContainerSecurityContext {
	return withKubeletPaths(&criapi.LinuxContainerSecurityContext{
		NamespaceOptions: kubeletNamespaces(),
		RunAsUser:        &criapi.Int64Value{Value: uid},
		RunAsGroup:       &criapi.Int64Value{Value: uid},
		Capabilities:     &criapi.Capability{DropCapabilities: []string{"ALL"}},
		Seccomp:          &criapi.SecurityProfile{ProfileType: criapi.SecurityProfile_RuntimeDefault},
		NoNewPrivs:       true,
	})
}

// confinedPod runs a cryo pod whose sandbox and container configs are
// edited by sb and ctr, with the container made from image.
func (n *criNode) confinedPod(name, image string, sb func(*criapi.PodSandboxConfig), ctr func(*criapi.ContainerConfig)) (*criPod, error) {
	n.t.Helper()
	p := &criPod{n: n, name: name, logDir: filepath.Join(n.dir, "pods", name)}
	p.cfg = p.sandboxConfig()
	if sb != nil {
		sb(p.cfg)
	}
	ctx, cancel := n.ctx()
	defer cancel()
	resp, err := n.rt.RunPodSandbox(ctx, &criapi.RunPodSandboxRequest{Config: p.cfg, RuntimeHandler: criHandler})
	if err != nil {
		n.t.Fatalf("RunPodSandbox %s: %v\n%s", name, err, lastLines(n.log(), 30))
	}
	p.id = resp.PodSandboxId
	cfg := p.appConfig(image)
	if ctr != nil {
		ctr(cfg)
	}
	if err := p.createWith(cfg); err != nil {
		return p, err
	}
	return p, p.start()
}

func privilegedPod(sb *criapi.PodSandboxConfig) {
	sb.Linux.SecurityContext.Privileged = true
}

func privilegedCtr(c *criapi.ContainerConfig) {
	c.Linux.SecurityContext.Privileged = true
	withKubeletPaths(c.Linux.SecurityContext) // privileged: none
}

func hostNetworkPod(sb *criapi.PodSandboxConfig) {
	sb.Linux.SecurityContext.NamespaceOptions.Network = criapi.NamespaceMode_NODE
	sb.Hostname = "" // the host's UTS namespace: the kubelet sets no hostname
}

func hostNetworkCtr(c *criapi.ContainerConfig) {
	c.Linux.SecurityContext.NamespaceOptions.Network = criapi.NamespaceMode_NODE
}

// restrictedAs is a restricted container of uid uid.
func restrictedAs(uid int64) func(*criapi.ContainerConfig) {
	return func(c *criapi.ContainerConfig) { c.Linux.SecurityContext = restrictedCtx(uid) }
}

// ckImage builds the archive into a runnable checkpoint image on the
// app's image in reg, pushes it and pulls it through CRI, as the kubelet
// pulls a pod's image; it returns the reference pinned by digest.
func (n *criNode) ckImage(reg *imgRegistry, archive, name string) string {
	n.t.Helper()
	ref := reg.addr + "/ckpt/" + name + ":v1"
	builder := newNode(n.t, nil)
	builder.cryo(n.t, "image", "build", "--runnable", archive, ref)
	pinned := reg.addr + "/ckpt/" + name + "@" + lastLine(builder.cryo(n.t, "image", "push", ref))
	n.pullImage(pinned)
	return pinned
}

func TestCRIConfine(t *testing.T) {
	reg := startRegistry(t)
	n := startCRINode(t)
	app := reg.addr + "/cryo/app:v1"
	n.publishApp(app)
	// Each source is restored into an ordinary pod: the restricted one
	// for the privileged source, one with the source's own security but
	// the pod's network for the hostNetwork source.
	cases := []struct {
		name    string
		sb      func(*criapi.PodSandboxConfig)
		ctr     func(*criapi.ContainerConfig)
		dst     func(*criapi.ContainerConfig)
		refusal []string
	}{
		{"Privileged", privilegedPod, privilegedCtr, restrictedAs(1000), []string{"uid is 0", "uid 1000"}},
		{"HostNetwork", hostNetworkPod, hostNetworkCtr, nil, []string{"network namespace", "the host's"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := n.with(t)
			src, err := n.confinedPod("src-"+strings.ToLower(tc.name), app, tc.sb, tc.ctr)
			if err != nil {
				t.Fatal(err)
			}
			n.waitTicksIn(src.logPath(), 3)
			archive := filepath.Join(n.dir, "ck-"+tc.name+".tar")
			src.checkpoint(archive)
			src.remove()
			image := n.ckImage(reg, archive, strings.ToLower(tc.name))
			dst, err := n.confinedPod("dst-"+strings.ToLower(tc.name), image, nil, tc.dst)
			if err == nil {
				t.Fatalf("the restore of a %s checkpoint into a restricted pod was not refused", tc.name)
			}
			for _, w := range append([]string{"confine", "nothing was restored"}, tc.refusal...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal lacks %q: %v", w, err)
				}
			}
			dst.remove()
		})
	}
	t.Run("RestrictedStaysRestricted", func(t *testing.T) {
		n := n.with(t)
		uid := int64(restrictedUID(t))
		src, err := n.confinedPod("src-restricted", app, nil, restrictedAs(uid))
		if err != nil {
			t.Fatal(err)
		}
		n.waitTicksIn(src.logPath(), 3)
		archive := filepath.Join(n.dir, "ck-restricted.tar")
		src.checkpoint(archive)
		src.remove()
		image := n.ckImage(reg, archive, "restricted")
		dst, err := n.confinedPod("dst-restricted", image, nil, restrictedAs(uid))
		if err != nil {
			t.Fatal(err)
		}
		n.waitTicksIn(dst.logPath(), 3)
		st := procStatus(t, dst.exec("/bin/cat", "/proc/1/status"))
		ids := fmt.Sprintf("%[1]d %[1]d %[1]d %[1]d", uid)
		want := map[string]string{"Uid": ids, "Gid": ids, "CapEff": "0000000000000000",
			"CapPrm": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
		for k, v := range want {
			if st[k] != v {
				t.Errorf("restored process: %s = %q, want %q", k, st[k], v)
			}
		}
		pid := criInitPID(t, n, dst)
		assertSameNetns(t, pid, dst)
		dst.remove()
	})
}

// procStatus parses /proc/<pid>/status.
func procStatus(t testing.TB, data string) map[string]string {
	t.Helper()
	fields := map[string]string{}
	for _, line := range strings.Split(data, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return fields
}

// criInitPID is the host pid of the pod container's init, from the CRI's
// verbose status.
func criInitPID(t *testing.T, n *criNode, p *criPod) string {
	t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	st, err := n.rt.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: p.container, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"pid":\s*(\d+)`).FindStringSubmatch(st.GetInfo()["info"])
	if m == nil {
		t.Fatalf("no pid in the container's verbose status: %v", st.GetInfo())
	}
	return m[1]
}

// assertSameNetns: the restored process is in its pod's network namespace
// (the sandbox's), not the host's.
func assertSameNetns(t *testing.T, pid string, p *criPod) {
	t.Helper()
	host, _ := os.Readlink("/proc/self/ns/net")
	got, err := os.Readlink("/proc/" + pid + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if got == host {
		t.Errorf("the restored process of pod %s is in the host's network namespace (%s)", p.name, got)
	}
	cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
	if !strings.Contains(string(cg), p.n.cgroup) {
		t.Errorf("the restored process is outside its pod's cgroup parent %s:\n%s", p.n.cgroup, cg)
	}
}
