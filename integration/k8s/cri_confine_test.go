package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// restrictedCtx is what the restricted PodSecurity profile makes the
// kubelet send: a non-root uid, every capability dropped, the runtime's
// default seccomp profile and no privilege escalation.
func restrictedCtx(uid int64) *criapi.LinuxContainerSecurityContext {
	return harness.WithKubeletPaths(&criapi.LinuxContainerSecurityContext{
		NamespaceOptions: harness.KubeletNamespaces(),
		RunAsUser:        &criapi.Int64Value{Value: uid},
		RunAsGroup:       &criapi.Int64Value{Value: uid},
		Capabilities:     &criapi.Capability{DropCapabilities: []string{"ALL"}},
		Seccomp:          &criapi.SecurityProfile{ProfileType: criapi.SecurityProfile_RuntimeDefault},
		NoNewPrivs:       true,
	})
}

func privilegedPod(sb *criapi.PodSandboxConfig) {
	sb.Linux.SecurityContext.Privileged = true
}

func privilegedCtr(c *criapi.ContainerConfig) {
	c.Linux.SecurityContext.Privileged = true
	harness.WithKubeletPaths(c.Linux.SecurityContext) // privileged: none
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

func TestCRIConfine(t *testing.T) {
	reg := harness.StartRegistry(t)
	n := harness.StartCRINode(t)
	app := reg.Addr + "/cryo/app:v1"
	n.PublishApp(app)
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
			n := n.With(t)
			src, err := n.ConfinedPod("src-"+strings.ToLower(tc.name), app, tc.sb, tc.ctr)
			if err != nil {
				t.Fatal(err)
			}
			n.WaitTicksIn(src.LogPath(), 3)
			archive := filepath.Join(n.Dir, "ck-"+tc.name+".tar")
			src.Checkpoint(archive)
			src.Remove()
			image := n.CkImage(reg, archive, strings.ToLower(tc.name))
			dst, err := n.ConfinedPod("dst-"+strings.ToLower(tc.name), image, nil, tc.dst)
			if err == nil {
				t.Fatalf("the restore of a %s checkpoint into a restricted pod was not refused", tc.name)
			}
			for _, w := range append([]string{"confine", "nothing was restored"}, tc.refusal...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal lacks %q: %v", w, err)
				}
			}
			dst.Remove()
		})
	}
	t.Run("RestrictedStaysRestricted", func(t *testing.T) {
		n := n.With(t)
		uid := int64(harness.RestrictedUID(t))
		src, err := n.ConfinedPod("src-restricted", app, nil, restrictedAs(uid))
		if err != nil {
			t.Fatal(err)
		}
		n.WaitTicksIn(src.LogPath(), 3)
		archive := filepath.Join(n.Dir, "ck-restricted.tar")
		src.Checkpoint(archive)
		src.Remove()
		image := n.CkImage(reg, archive, "restricted")
		dst, err := n.ConfinedPod("dst-restricted", image, nil, restrictedAs(uid))
		if err != nil {
			t.Fatal(err)
		}
		n.WaitTicksIn(dst.LogPath(), 3)
		st := harness.ProcStatus(t, dst.Exec("/bin/cat", "/proc/1/status"))
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
		dst.Remove()
	})
}

// criInitPID is the host pid of the pod container's init, from the CRI's
// verbose status.
func criInitPID(t *testing.T, n *harness.CRINode, p *harness.CRIPod) string {
	t.Helper()
	ctx, cancel := n.Ctx()
	defer cancel()
	st, err := n.Rt.ContainerStatus(ctx, &criapi.ContainerStatusRequest{ContainerId: p.Container, Verbose: true})
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
func assertSameNetns(t *testing.T, pid string, p *harness.CRIPod) {
	t.Helper()
	host, _ := os.Readlink("/proc/self/ns/net")
	got, err := os.Readlink("/proc/" + pid + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if got == host {
		t.Errorf("the restored process of pod %s is in the host's network namespace (%s)", p.Name, got)
	}
	cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
	if !strings.Contains(string(cg), p.N.Cgroup) {
		t.Errorf("the restored process is outside its pod's cgroup parent %s:\n%s", p.N.Cgroup, cg)
	}
}
