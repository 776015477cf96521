package cli

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

func TestAnnotationPolicy(t *testing.T) {
	start := time.Now()
	reg := harness.StartRegistry(t)
	// Node 1 checkpoints the app; it is started before any policy is
	// named, so it has the default: off.
	ck := harness.CheckpointOnNode1(t, reg, reg.Addr+"/cryo/app:v1")

	// Tenant A's checkpoint, in a registry that wants a password.
	priv := harness.StartPrivateRegistry(t)
	builder := harness.NewNode(t, nil)
	tagA := priv.Addr + "/tenant-a/app:v1"
	builder.Cryo(t, "image", "build", ck.Archive, tagA)
	pinnedA := harness.PinnedRef(tagA, builder.Cryo(t, "image", "push", "--authfile", priv.AuthFile(t, t.TempDir(), harness.PrivatePassword), tagA))

	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	t.Setenv("CRYO_IMAGE_STORE", store)
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	t.Setenv("REGISTRY_AUTH_FILE", priv.AuthFile(t, dir, harness.PrivatePassword))
	pol := tenantPolicy(priv.Addr)
	policyFile := harness.UsePolicy(t, pol)
	n2 := harness.StartCRINodeAt(t, 1).With(t)

	t.Run("OffByDefault", func(t *testing.T) { policyOff(ck.Node1.With(t), pinnedA) })
	t.Run("CrossTenant", func(t *testing.T) { policyCrossTenant(n2.With(t), ck, pinnedA, priv.Addr, dir) })
	t.Run("Tag", func(t *testing.T) { policyTag(n2.With(t), tagA) })
	t.Run("RepushedTag", func(t *testing.T) { policyRepushedTag(n2.With(t), ck, reg, store) })
	t.Run("PlainHTTP", func(t *testing.T) { policyPlainHTTP(n2.With(t), ck, reg, pol, policyFile) })
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
func policyOff(n *harness.CRINode, ref string) {
	p := n.NewPodIn("tenant-a", "off", map[string]string{imagerestore.AnnImage: ref})
	err := p.Refused()
	harness.WantIn(n.T, err.Error(), "is off on this node", "the node's admin must enable it", config.EnvAnnotationRestore, `"enabled": true`)
	p.Remove()

	p = n.NewPodIn("tenant-a", "off-fresh", map[string]string{imagerestore.AnnImage: ref, imagerestore.AnnOnFailure: string(imagerestore.PolicyFresh)})
	if err := p.Create(harness.TestImage); err != nil {
		n.T.Fatal(err)
	}
	if err := p.Start(); err != nil {
		n.T.Fatalf("fresh policy on a node that is off: %v", err)
	}
	n.WaitTicksIn(p.LogPath(), 2)
	if first := harness.CtrdTicks(n.T, p.LogPath())[0]; first > 1 {
		n.T.Errorf("fresh policy: first tick %d, want a fresh start", first)
	}
	p.Remove()
}

// policyCrossTenant (b): tenant A restores its image, which the shim
// pulls with the node's credentials into the node's store. Tenant B then
// names it: refused, though the node holds it. Naming its own repository
// with A's digest gets no stored copy and no credentials: refused. With
// the node's credentials broken, a namespace without an entry is refused
// all the same.
func policyCrossTenant(n *harness.CRINode, ck harness.CRICheckpoint, pinnedA, priv, dir string) {
	t := n.T
	p := n.NewPodIn("tenant-a", "tenant-a", map[string]string{imagerestore.AnnImage: pinnedA})
	if err := p.Create(harness.TestImage); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("tenant A's own restore: %v\n%s", err, harness.LastLines(n.Log(), 30))
	}
	n.AssertContinues(p, ck)
	p.AssertMarker()
	harness.WantDigestLogged(t, n.Log(), pinnedA)
	p.Remove()

	p = n.NewPodIn("tenant-b", "tenant-b", map[string]string{imagerestore.AnnImage: pinnedA})
	harness.WantIn(t, p.Refused().Error(), `does not allow namespace "tenant-b" to restore from `+priv+"/tenant-a/app", "permission denied", "remedy: ask the node's admin")
	p.Remove()

	borrowed := priv + "/tenant-b/app@" + pinnedA[strings.LastIndex(pinnedA, "@")+1:]
	p = n.NewPodIn("tenant-b", "tenant-b-digest", map[string]string{imagerestore.AnnImage: borrowed})
	harness.WantIn(t, p.Refused().Error(), "step pull the checkpoint image "+borrowed, "anonymously")
	p.Remove()

	if err := os.WriteFile(filepath.Join(dir, "auth.json"), []byte(`{"auths":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p = n.NewPodIn("tenant-c", "tenant-c", map[string]string{imagerestore.AnnImage: pinnedA})
	harness.WantIn(t, p.Refused().Error(), `does not allow namespace "tenant-c"`)
	p.Remove()
	p = n.NewPodIn("", "no-namespace", map[string]string{imagerestore.AnnImage: pinnedA})
	harness.WantIn(t, p.Refused().Error(), `namespace ""`)
	p.Remove()
}

// policyTag (c): a tag is refused even in the namespace allowed its
// repository, with the image in the node's store, and the remedy says how
// to pin it.
func policyTag(n *harness.CRINode, tag string) {
	p := n.NewPodIn("tenant-a", "tag", map[string]string{imagerestore.AnnImage: tag})
	harness.WantIn(n.T, p.Refused().Error(), "names no digest", "pinned by digest", "remedy: name the image by its digest", "cryo image push")
	p.Remove()
}

// policyRepushedTag (d): tenant A's image is pushed under a tag and
// pinned; then another build of the checkpoint (another digest, as an
// attacker's image would have) is pushed under the same tag, and the node
// pulls the moved tag into its store. The tag itself is refused, and the
// pinned digest still restores the first image.
func policyRepushedTag(n *harness.CRINode, ck harness.CRICheckpoint, reg *harness.ImgRegistry, store string) {
	t := n.T
	builder := harness.NewNode(t, nil)
	tag := reg.Addr + "/tenant-a/moved:v1"
	builder.Cryo(t, "image", "build", ck.Archive, tag)
	pinned := harness.PinnedRef(tag, builder.Cryo(t, "image", "push", tag))
	builder.Cryo(t, "image", "build", "--level", "fastest", ck.Archive, tag)
	moved := harness.PinnedRef(tag, builder.Cryo(t, "image", "push", tag))
	if moved == pinned {
		t.Fatalf("the re-pushed tag kept its digest %s", pinned)
	}
	// The node pulls the moved tag, as `cryo image pull` by hand would.
	node := &harness.ImgNode{Store: store, Env: []string{"CRYO_IMAGE_STORE=" + store}}
	if got := harness.PinnedRef(tag, node.Cryo(t, "image", "pull", tag)); got != moved {
		t.Fatalf("the node pulled %s for the moved tag, want %s", got, moved)
	}

	harness.WriteAnnotationPolicy(t, config.EnvAnnotationRestore, harness.AllowOnly("tenant-a", []string{reg.Addr + "/tenant-a"}, reg.Addr))
	p := n.NewPodIn("tenant-a", "moved-tag", map[string]string{imagerestore.AnnImage: tag})
	harness.WantIn(t, p.Refused().Error(), "pinned by digest")
	p.Remove()

	p = n.NewPodIn("tenant-a", "pinned", map[string]string{imagerestore.AnnImage: pinned})
	if err := p.Create(harness.TestImage); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("restore of the pinned digest after the tag moved: %v\n%s", err, harness.LastLines(n.Log(), 30))
	}
	n.AssertContinues(p, ck)
	p.AssertMarker()
	harness.WantDigestLogged(t, n.Log(), pinned)
	p.Remove()
}

// policyPlainHTTP (e): a registry on loopback that speaks plain HTTP, not
// listed as insecure, gets no plain HTTP request: the shim speaks HTTPS
// to it, and the restore fails. A loopback port that no namespace is
// allowed gets no connection at all. Listed as insecure, the same
// registry serves the restore (the counter does count).
func policyPlainHTTP(n *harness.CRINode, ck harness.CRICheckpoint, reg *harness.ImgRegistry, pol config.AnnotationPolicy, policyFile string) {
	t := n.T
	proxy := startCountingProxy(t, reg.Addr)
	builder := harness.NewNode(t, nil)
	tag := proxy.addr + "/tenant-a/plain:v1"
	builder.Cryo(t, "image", "build", ck.Archive, tag)
	pinned := harness.PinnedRef(tag, builder.Cryo(t, "image", "push", tag)) // the CLI: plain HTTP to loopback
	pushed := proxy.http.Load()

	rule := pol.Namespaces["tenant-a"]
	rule.Repositories = append(rule.Repositories, proxy.addr+"/tenant-a")
	pol.Namespaces["tenant-a"] = rule
	harness.WriteAnnotationPolicy(t, policyFile, pol)
	p := n.NewPodIn("tenant-a", "plain", map[string]string{imagerestore.AnnImage: pinned})
	harness.WantIn(t, p.Refused().Error(), "step pull the checkpoint image "+pinned, "over HTTPS", "insecure_registries")
	p.Remove()
	if got := proxy.http.Load() - pushed; got != 0 {
		t.Errorf("a registry not listed as insecure got %d plain HTTP connections", got)
	}
	t.Logf("unlisted loopback registry: %d plain HTTP connections, %d others (TLS)", proxy.http.Load()-pushed, proxy.other.Load())

	other := startCountingProxy(t, reg.Addr)
	p = n.NewPodIn("tenant-a", "ssrf", map[string]string{imagerestore.AnnImage: other.addr + "/tenant-a/plain@" + pinned[strings.LastIndex(pinned, "@")+1:]})
	harness.WantIn(t, p.Refused().Error(), "permission denied")
	p.Remove()
	if c := other.http.Load() + other.other.Load(); c != 0 {
		t.Errorf("a loopback port that no namespace is allowed got %d connections", c)
	}

	pol.InsecureRegistries = append(pol.InsecureRegistries, proxy.addr)
	harness.WriteAnnotationPolicy(t, policyFile, pol)
	p = n.NewPodIn("tenant-a", "plain-listed", map[string]string{imagerestore.AnnImage: pinned})
	if err := p.Create(harness.TestImage); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("restore from a registry listed as insecure: %v\n%s", err, harness.LastLines(n.Log(), 30))
	}
	n.AssertContinues(p, ck)
	p.Remove()
	if proxy.http.Load() == pushed {
		t.Error("the listed registry's restore sent no plain HTTP request through the counter")
	}
}

// policyRefusals, through containerd's Go client on 1.7 and 2.x: a tag is
// refused; a container in namespace tenant-b (the annotation CRI sets) is
// refused the image that the node's store holds from namespace ""'s
// restore; a policy turned off, or one that others can write, refuses
// every restore. Each refusal leaves no task, with its error class.
func (n *annotNode) policyRefusals(t *testing.T, pinned, tag string) {
	_, err := n.Refused(t, "tag", map[string]string{imagerestore.AnnImage: tag})
	harness.WantIn(t, err.Error(), "names no digest", "cryo image push")
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("error class of a tag: %v", err)
	}
	ann := map[string]string{imagerestore.AnnImage: pinned, imagerestore.AnnCRISandboxNamespace: "tenant-b"}
	_, err = n.Refused(t, "tenant", ann)
	harness.WantIn(t, err.Error(), `does not allow namespace "tenant-b"`)
	// containerd 1.7 has no class for PermissionDenied: its clients see
	// Unknown, with the message kept.
	if !errdefs.IsPermissionDenied(err) && !(n.V.ConfigVersion == 2 && strings.Contains(err.Error(), "permission denied")) {
		t.Errorf("error class of another namespace: %v", err)
	}

	ann = map[string]string{imagerestore.AnnImage: pinned}
	n.pol.Enabled = false
	harness.WriteAnnotationPolicy(t, n.policy, n.pol)
	_, err = n.Refused(t, "off", ann)
	harness.WantIn(t, err.Error(), "is off on this node", "the node's admin must enable it", config.EnvAnnotationRestore)
	if !errdefs.IsFailedPrecondition(err) {
		t.Errorf("error class of a node that is off: %v", err)
	}
	n.pol.Enabled = true
	harness.WriteAnnotationPolicy(t, n.policy, n.pol)
	if err := os.Chmod(n.policy, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = n.Refused(t, "writable", ann)
	harness.WantIn(t, err.Error(), "writable by group or others", "cryo doctor")
	if err := os.Chmod(n.policy, 0o600); err != nil {
		t.Fatal(err)
	}
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
