package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// AllowOnly is a policy that is on and allows namespace ns the
// repositories repos, anonymously; the insecure registries get plain HTTP.
func AllowOnly(ns string, repos []string, insecure ...string) config.AnnotationPolicy {
	return config.AnnotationPolicy{Enabled: true, InsecureRegistries: insecure,
		Namespaces: map[string]config.NamespaceRule{ns: {Repositories: repos}}}
}

// UsePolicy writes p into a new policy file and names it in the
// environment that the next containerd, and so its shims, inherit. The
// shim reads the file at every restore: rewrite it to change the policy.
func UsePolicy(t testing.TB, p config.AnnotationPolicy) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "annotation-restore.json")
	WriteAnnotationPolicy(t, path, p)
	t.Setenv(config.EnvAnnotationRestore, path)
	return path
}

// WriteAnnotationPolicy writes p to path (a name of the environment
// stands for the file it names), owner-only as the shim wants it.
func WriteAnnotationPolicy(t testing.TB, path string, p config.AnnotationPolicy) {
	t.Helper()
	if path == config.EnvAnnotationRestore {
		path = os.Getenv(path)
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// PinnedRef is ref's repository pinned to the digest that `cryo image
// push`, `pull` or `build` printed last in out.
func PinnedRef(ref, out string) string {
	out = strings.TrimSpace(out)
	dgst := out[strings.LastIndex(out, "\n")+1:]
	repo := ref
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo = ref[:i]
	}
	return repo + "@" + dgst
}

// WantDigestLogged checks that the shim logged the digest it restored.
func WantDigestLogged(t testing.TB, log, pinned string) {
	t.Helper()
	dgst := pinned[strings.LastIndex(pinned, "@")+1:]
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "checkpoint image unpacked and verified") && strings.Contains(line, dgst) {
			return
		}
	}
	t.Errorf("the shim's log has no restore of %s", dgst)
}

// newPodIn runs a cryo pod sandbox in Kubernetes namespace ns, as newPod
// does in "default": CRI puts the namespace into every container's spec.
func (n *CRINode) NewPodIn(ns, name string, ann map[string]string) *CRIPod {
	n.T.Helper()
	p := &CRIPod{N: n, Name: name, logDir: filepath.Join(n.Dir, "pods", name)}
	p.cfg = p.sandboxConfig()
	p.cfg.Metadata.Namespace = ns
	p.cfg.Annotations = ann
	ctx, cancel := n.Ctx()
	defer cancel()
	sb, err := n.Rt.RunPodSandbox(ctx, &criapi.RunPodSandboxRequest{Config: p.cfg, RuntimeHandler: CRIHandler})
	if err != nil {
		n.T.Fatalf("RunPodSandbox %s/%s: %v\n%s", ns, name, err, LastLines(n.Log(), 30))
	}
	p.ID = sb.PodSandboxId
	return p
}

// refused creates the pod's container of the app's image and starts it,
// which must fail; the container must have exited with the reason.
func (p *CRIPod) Refused() error {
	t := p.N.T
	t.Helper()
	if err := p.Create(TestImage); err != nil {
		t.Fatal(err)
	}
	err := p.Start()
	if err == nil {
		t.Fatalf("pod %s started\n%s", p.Name, LastLines(p.N.Log(), 30))
	}
	if st := p.Status(); st.State != criapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("refused container of pod %s: %s, want exited", p.Name, st.State)
	}
	t.Logf("%s: %v", p.Name, err)
	return err
}
