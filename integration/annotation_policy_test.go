package integration

// The annotation restore path as an attacker sees it, through containerd
// 2.x's CRI with real registries: the shim pulls a checkpoint image on a
// pod's behalf, from the host's network and with the node's registry
// credentials, so the node's policy (CRYO_ANNOTATION_RESTORE) decides. It
// is off unless the node opts in; then a pod restores only digest-pinned
// images of the repositories allowed to its namespace, pulls anonymously
// unless its namespace may use the node's credentials, and speaks plain
// HTTP only to the registries listed as insecure, never to loopback by
// default.

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

func TestAnnotationPolicy(t *testing.T) {
	start := time.Now()
	reg := startRegistry(t)
	// Node 1 checkpoints the app; it is started before any policy is
	// named, so it has the default: off.
	ck := checkpointOnNode1(t, reg, reg.addr+"/cryo/app:v1")

	// Tenant A's checkpoint, in a registry that wants a password.
	priv := startPrivateRegistry(t)
	builder := newNode(t, nil)
	tagA := priv.addr + "/tenant-a/app:v1"
	builder.cryo(t, "image", "build", ck.archive, tagA)
	pinnedA := pinnedRef(tagA, builder.cryo(t, "image", "push", "--authfile", priv.authFile(t, t.TempDir(), privatePassword), tagA))

	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	t.Setenv("CRYO_IMAGE_STORE", store)
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	t.Setenv("REGISTRY_AUTH_FILE", priv.authFile(t, dir, privatePassword))
	pol := tenantPolicy(priv.addr)
	policyFile := usePolicy(t, pol)
	n2 := startCRINodeAt(t, 1).with(t)

	t.Run("OffByDefault", func(t *testing.T) { policyOff(ck.node1.with(t), pinnedA) })
	t.Run("CrossTenant", func(t *testing.T) { policyCrossTenant(n2.with(t), ck, pinnedA, priv.addr, dir) })
	t.Run("Tag", func(t *testing.T) { policyTag(n2.with(t), tagA) })
	t.Run("RepushedTag", func(t *testing.T) { policyRepushedTag(n2.with(t), ck, reg, store) })
	t.Run("PlainHTTP", func(t *testing.T) { policyPlainHTTP(n2.with(t), ck, reg, pol, policyFile) })
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

// tenantPolicy allows tenant-a its repositories on the private registry
// with the node's credentials, and tenant-b its own there, anonymously.
func tenantPolicy(priv string) config.AnnotationPolicy {
	return config.AnnotationPolicy{Enabled: true, InsecureRegistries: []string{priv},
		Namespaces: map[string]config.NamespaceRule{
			"tenant-a": {Repositories: []string{priv + "/tenant-a/"}, UseNodeCredentials: true},
			"tenant-b": {Repositories: []string{priv + "/tenant-b"}},
		}}
}

// policyOff (a): a node that named no policy refuses the annotation and
// says who can change that; the pod author's fresh policy still starts
// the container, fresh.
func policyOff(n *criNode, ref string) {
	p := n.newPodIn("tenant-a", "off", map[string]string{imagerestore.AnnImage: ref})
	err := p.refused()
	wantIn(n.t, err.Error(), "is off on this node", "the node's admin must enable it", config.EnvAnnotationRestore, `"enabled": true`)
	p.remove()

	p = n.newPodIn("tenant-a", "off-fresh", map[string]string{imagerestore.AnnImage: ref, imagerestore.AnnOnFailure: string(imagerestore.PolicyFresh)})
	if err := p.create(testImage); err != nil {
		n.t.Fatal(err)
	}
	if err := p.start(); err != nil {
		n.t.Fatalf("fresh policy on a node that is off: %v", err)
	}
	n.waitTicksIn(p.logPath(), 2)
	if first := ctrdTicks(n.t, p.logPath())[0]; first > 1 {
		n.t.Errorf("fresh policy: first tick %d, want a fresh start", first)
	}
	p.remove()
}

// policyCrossTenant (b): tenant A restores its image, which the shim
// pulls with the node's credentials into the node's store. Tenant B then
// names it: refused, though the node holds it. Naming its own repository
// with A's digest gets no stored copy and no credentials: refused. With
// the node's credentials broken, a namespace without an entry is refused
// all the same.
func policyCrossTenant(n *criNode, ck criCheckpoint, pinnedA, priv, dir string) {
	t := n.t
	p := n.newPodIn("tenant-a", "tenant-a", map[string]string{imagerestore.AnnImage: pinnedA})
	if err := p.create(testImage); err != nil {
		t.Fatal(err)
	}
	if err := p.start(); err != nil {
		t.Fatalf("tenant A's own restore: %v\n%s", err, lastLines(n.log(), 30))
	}
	n.assertContinues(p, ck)
	p.assertMarker()
	wantDigestLogged(t, n.log(), pinnedA)
	p.remove()

	p = n.newPodIn("tenant-b", "tenant-b", map[string]string{imagerestore.AnnImage: pinnedA})
	wantIn(t, p.refused().Error(), `does not allow namespace "tenant-b" to restore from `+priv+"/tenant-a/app", "permission denied", "remedy: ask the node's admin")
	p.remove()

	borrowed := priv + "/tenant-b/app@" + pinnedA[strings.LastIndex(pinnedA, "@")+1:]
	p = n.newPodIn("tenant-b", "tenant-b-digest", map[string]string{imagerestore.AnnImage: borrowed})
	wantIn(t, p.refused().Error(), "step pull the checkpoint image "+borrowed, "anonymously")
	p.remove()

	if err := os.WriteFile(filepath.Join(dir, "auth.json"), []byte(`{"auths":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p = n.newPodIn("tenant-c", "tenant-c", map[string]string{imagerestore.AnnImage: pinnedA})
	wantIn(t, p.refused().Error(), `does not allow namespace "tenant-c"`)
	p.remove()
	p = n.newPodIn("", "no-namespace", map[string]string{imagerestore.AnnImage: pinnedA})
	wantIn(t, p.refused().Error(), `namespace ""`)
	p.remove()
}

// policyTag (c): a tag is refused even in the namespace allowed its
// repository, with the image in the node's store, and the remedy says how
// to pin it.
func policyTag(n *criNode, tag string) {
	p := n.newPodIn("tenant-a", "tag", map[string]string{imagerestore.AnnImage: tag})
	wantIn(n.t, p.refused().Error(), "names no digest", "pinned by digest", "remedy: name the image by its digest", "cryo image push")
	p.remove()
}

// policyRepushedTag (d): tenant A's image is pushed under a tag and
// pinned; then another build of the checkpoint (another digest, as an
// attacker's image would have) is pushed under the same tag, and the node
// pulls the moved tag into its store. The tag itself is refused, and the
// pinned digest still restores the first image.
func policyRepushedTag(n *criNode, ck criCheckpoint, reg *imgRegistry, store string) {
	t := n.t
	builder := newNode(t, nil)
	tag := reg.addr + "/tenant-a/moved:v1"
	builder.cryo(t, "image", "build", ck.archive, tag)
	pinned := pinnedRef(tag, builder.cryo(t, "image", "push", tag))
	builder.cryo(t, "image", "build", "--level", "fastest", ck.archive, tag)
	moved := pinnedRef(tag, builder.cryo(t, "image", "push", tag))
	if moved == pinned {
		t.Fatalf("the re-pushed tag kept its digest %s", pinned)
	}
	// The node pulls the moved tag, as `cryo image pull` by hand would.
	node := &imgNode{store: store, env: []string{"CRYO_IMAGE_STORE=" + store}}
	if got := pinnedRef(tag, node.cryo(t, "image", "pull", tag)); got != moved {
		t.Fatalf("the node pulled %s for the moved tag, want %s", got, moved)
	}

	writeAnnotationPolicy(t, config.EnvAnnotationRestore, allowOnly("tenant-a", []string{reg.addr + "/tenant-a"}, reg.addr))
	p := n.newPodIn("tenant-a", "moved-tag", map[string]string{imagerestore.AnnImage: tag})
	wantIn(t, p.refused().Error(), "pinned by digest")
	p.remove()

	p = n.newPodIn("tenant-a", "pinned", map[string]string{imagerestore.AnnImage: pinned})
	if err := p.create(testImage); err != nil {
		t.Fatal(err)
	}
	if err := p.start(); err != nil {
		t.Fatalf("restore of the pinned digest after the tag moved: %v\n%s", err, lastLines(n.log(), 30))
	}
	n.assertContinues(p, ck)
	p.assertMarker()
	wantDigestLogged(t, n.log(), pinned)
	p.remove()
}

// policyPlainHTTP (e): a registry on loopback that speaks plain HTTP, not
// listed as insecure, gets no plain HTTP request: the shim speaks HTTPS
// to it, and the restore fails. A loopback port that no namespace is
// allowed gets no connection at all. Listed as insecure, the same
// registry serves the restore (the counter does count).
func policyPlainHTTP(n *criNode, ck criCheckpoint, reg *imgRegistry, pol config.AnnotationPolicy, policyFile string) {
	t := n.t
	proxy := startCountingProxy(t, reg.addr)
	builder := newNode(t, nil)
	tag := proxy.addr + "/tenant-a/plain:v1"
	builder.cryo(t, "image", "build", ck.archive, tag)
	pinned := pinnedRef(tag, builder.cryo(t, "image", "push", tag)) // the CLI: plain HTTP to loopback
	pushed := proxy.http.Load()

	rule := pol.Namespaces["tenant-a"]
	rule.Repositories = append(rule.Repositories, proxy.addr+"/tenant-a")
	pol.Namespaces["tenant-a"] = rule
	writeAnnotationPolicy(t, policyFile, pol)
	p := n.newPodIn("tenant-a", "plain", map[string]string{imagerestore.AnnImage: pinned})
	wantIn(t, p.refused().Error(), "step pull the checkpoint image "+pinned, "over HTTPS", "insecure_registries")
	p.remove()
	if got := proxy.http.Load() - pushed; got != 0 {
		t.Errorf("a registry not listed as insecure got %d plain HTTP connections", got)
	}
	t.Logf("unlisted loopback registry: %d plain HTTP connections, %d others (TLS)", proxy.http.Load()-pushed, proxy.other.Load())

	other := startCountingProxy(t, reg.addr)
	p = n.newPodIn("tenant-a", "ssrf", map[string]string{imagerestore.AnnImage: other.addr + "/tenant-a/plain@" + pinned[strings.LastIndex(pinned, "@")+1:]})
	wantIn(t, p.refused().Error(), "permission denied")
	p.remove()
	if c := other.http.Load() + other.other.Load(); c != 0 {
		t.Errorf("a loopback port that no namespace is allowed got %d connections", c)
	}

	pol.InsecureRegistries = append(pol.InsecureRegistries, proxy.addr)
	writeAnnotationPolicy(t, policyFile, pol)
	p = n.newPodIn("tenant-a", "plain-listed", map[string]string{imagerestore.AnnImage: pinned})
	if err := p.create(testImage); err != nil {
		t.Fatal(err)
	}
	if err := p.start(); err != nil {
		t.Fatalf("restore from a registry listed as insecure: %v\n%s", err, lastLines(n.log(), 30))
	}
	n.assertContinues(p, ck)
	p.remove()
	if proxy.http.Load() == pushed {
		t.Error("the listed registry's restore sent no plain HTTP request through the counter")
	}
}

// allowOnly is a policy that is on and allows namespace ns the
// repositories repos, anonymously; the insecure registries get plain HTTP.
func allowOnly(ns string, repos []string, insecure ...string) config.AnnotationPolicy {
	return config.AnnotationPolicy{Enabled: true, InsecureRegistries: insecure,
		Namespaces: map[string]config.NamespaceRule{ns: {Repositories: repos}}}
}

// storedDigest is the digest of ref in an image store.
func storedDigest(t *testing.T, store, ref string) string {
	t.Helper()
	var index ocispec.Index
	readJSON(t, filepath.Join(store, "index.json"), &index)
	for _, d := range index.Manifests {
		if d.Annotations[ocispec.AnnotationRefName] == ref {
			return d.Digest.String()
		}
	}
	t.Fatalf("%s is not in the store %s", ref, store)
	return ""
}

// policyRefusals, through containerd's Go client on 1.7 and 2.x: a tag is
// refused; a container in namespace tenant-b (the annotation CRI sets) is
// refused the image that the node's store holds from namespace ""'s
// restore; a policy turned off, or one that others can write, refuses
// every restore. Each refusal leaves no task, with its error class.
func (n *annotNode) policyRefusals(t *testing.T, pinned, tag string) {
	_, err := n.refused(t, "tag", map[string]string{imagerestore.AnnImage: tag})
	wantIn(t, err.Error(), "names no digest", "cryo image push")
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("error class of a tag: %v", err)
	}
	ann := map[string]string{imagerestore.AnnImage: pinned, imagerestore.AnnCRISandboxNamespace: "tenant-b"}
	_, err = n.refused(t, "tenant", ann)
	wantIn(t, err.Error(), `does not allow namespace "tenant-b"`)
	// containerd 1.7 has no class for PermissionDenied: its clients see
	// Unknown, with the message kept.
	if !errdefs.IsPermissionDenied(err) && !(n.v.configVersion == 2 && strings.Contains(err.Error(), "permission denied")) {
		t.Errorf("error class of another namespace: %v", err)
	}

	ann = map[string]string{imagerestore.AnnImage: pinned}
	n.pol.Enabled = false
	writeAnnotationPolicy(t, n.policy, n.pol)
	_, err = n.refused(t, "off", ann)
	wantIn(t, err.Error(), "is off on this node", "the node's admin must enable it", config.EnvAnnotationRestore)
	if !errdefs.IsFailedPrecondition(err) {
		t.Errorf("error class of a node that is off: %v", err)
	}
	n.pol.Enabled = true
	writeAnnotationPolicy(t, n.policy, n.pol)
	if err := os.Chmod(n.policy, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = n.refused(t, "writable", ann)
	wantIn(t, err.Error(), "writable by group or others", "cryo doctor")
	if err := os.Chmod(n.policy, 0o600); err != nil {
		t.Fatal(err)
	}
}

// usePolicy writes p into a new policy file and names it in the
// environment that the next containerd, and so its shims, inherit. The
// shim reads the file at every restore: rewrite it to change the policy.
func usePolicy(t testing.TB, p config.AnnotationPolicy) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "annotation-restore.json")
	writeAnnotationPolicy(t, path, p)
	t.Setenv(config.EnvAnnotationRestore, path)
	return path
}

// writeAnnotationPolicy writes p to path (a name of the environment
// stands for the file it names), owner-only as the shim wants it.
func writeAnnotationPolicy(t testing.TB, path string, p config.AnnotationPolicy) {
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

// pinnedRef is ref's repository pinned to the digest that `cryo image
// push`, `pull` or `build` printed last in out.
func pinnedRef(ref, out string) string {
	out = strings.TrimSpace(out)
	dgst := out[strings.LastIndex(out, "\n")+1:]
	repo := ref
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo = ref[:i]
	}
	return repo + "@" + dgst
}

// wantDigestLogged checks that the shim logged the digest it restored.
func wantDigestLogged(t testing.TB, log, pinned string) {
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
func (n *criNode) newPodIn(ns, name string, ann map[string]string) *criPod {
	n.t.Helper()
	p := &criPod{n: n, name: name, logDir: filepath.Join(n.dir, "pods", name)}
	p.cfg = p.sandboxConfig()
	p.cfg.Metadata.Namespace = ns
	p.cfg.Annotations = ann
	ctx, cancel := n.ctx()
	defer cancel()
	sb, err := n.rt.RunPodSandbox(ctx, &criapi.RunPodSandboxRequest{Config: p.cfg, RuntimeHandler: criHandler})
	if err != nil {
		n.t.Fatalf("RunPodSandbox %s/%s: %v\n%s", ns, name, err, lastLines(n.log(), 30))
	}
	p.id = sb.PodSandboxId
	return p
}

// refused creates the pod's container of the app's image and starts it,
// which must fail; the container must have exited with the reason.
func (p *criPod) refused() error {
	t := p.n.t
	t.Helper()
	if err := p.create(testImage); err != nil {
		t.Fatal(err)
	}
	err := p.start()
	if err == nil {
		t.Fatalf("pod %s started\n%s", p.name, lastLines(p.n.log(), 30))
	}
	if st := p.status(); st.State != criapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("refused container of pod %s: %s, want exited", p.name, st.State)
	}
	t.Logf("%s: %v", p.name, err)
	return err
}

// countingProxy forwards TCP connections on loopback to a plain HTTP
// registry and counts them by their first bytes: an HTTP request, or
// anything else (a TLS handshake, which it drops).
type countingProxy struct {
	addr        string
	http, other atomic.Int32
}

func startCountingProxy(t testing.TB, backend string) *countingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &countingProxy{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(c, backend)
		}
	}()
	return p
}

func (p *countingProxy) serve(c net.Conn, backend string) {
	defer c.Close()
	r := bufio.NewReader(c)
	first, err := r.Peek(4)
	if err != nil || !isHTTPMethod(string(first)) {
		p.other.Add(1)
		return
	}
	p.http.Add(1)
	b, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer b.Close()
	go func() { _, _ = r.WriteTo(b) }()
	_, _ = bufio.NewReader(b).WriteTo(c)
}

func isHTTPMethod(s string) bool {
	for _, m := range []string{"GET ", "HEAD", "POST", "PUT ", "PATC", "DELE", "OPTI"} {
		if s == m {
			return true
		}
	}
	return false
}
