package integration

// A container on the cryo runtime whose spec names a checkpoint image
// (the annotation cryo.io/checkpoint-image, which a Kubernetes pod's
// annotations become through containerd's pod_annotations) starts from
// that checkpoint: the shim pulls and verifies the image, applies its
// rootfs diff and restores, on containerd 1.7 and 2.x, without
// containerd's own CRI restore. Node A checkpoints fakecuda-app and pushes
// the image to a registry; node B, whose policy lets containers outside
// Kubernetes (namespace "") restore from the registries' ckpt/
// repositories, creates a container from the app's ordinary image with
// the annotation naming the image by digest, through containerd's Go
// client.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	godigest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

func TestImageAnnotation(t *testing.T) {
	for _, v := range ctrdVersions {
		t.Run(v.name, func(t *testing.T) {
			began := time.Now()
			testImageAnnotation(t, v)
			t.Logf("%s took %s", v.name, time.Since(began).Round(time.Millisecond))
		})
	}
}

// annotNode is node B: a containerd whose shims have their own image
// store and work directory base (from the daemon's environment, which the
// shims inherit).
type annotNode struct {
	*daemon
	store, work string
	auth        string // the auth file in the daemon's environment (REGISTRY_AUTH_FILE)
	// policy is the annotation restore policy file in the daemon's
	// environment (CRYO_ANNOTATION_RESTORE), pol what it holds.
	policy string
	pol    config.AnnotationPolicy
}

// newAnnotNode starts node B with a policy that lets namespace "" restore
// from the ckpt/ repositories of the registries regs (plain HTTP), with
// the node's credentials.
func newAnnotNode(t *testing.T, v ctrdVersion, regs ...string) *annotNode {
	dir := t.TempDir()
	n := &annotNode{store: filepath.Join(dir, "store"), work: filepath.Join(dir, "restore"), auth: filepath.Join(dir, "auth.json")}
	t.Setenv("CRYO_IMAGE_STORE", n.store)
	t.Setenv("CRYO_RESTORE_DIR", n.work)
	t.Setenv("REGISTRY_AUTH_FILE", n.auth)
	var repos []string
	for _, r := range regs {
		repos = append(repos, r+"/ckpt/")
	}
	n.pol = allowOnly("", repos, regs...)
	n.setNodeCredentials(t, true)
	n.daemon = startDaemon(t, v)
	return n
}

// setNodeCredentials rewrites the policy with namespace "" allowed the
// node's credentials or not; the next restore reads it.
func (n *annotNode) setNodeCredentials(t *testing.T, use bool) {
	rule := n.pol.Namespaces[""]
	rule.UseNodeCredentials = use
	n.pol.Namespaces[""] = rule
	if n.policy == "" {
		n.policy = usePolicy(t, n.pol)
		return
	}
	writeAnnotationPolicy(t, n.policy, n.pol)
}

func testImageAnnotation(t *testing.T, v ctrdVersion) {
	reg := startRegistry(t)
	a := newCtrdNode(t, v)
	a.importTestImage()
	app := uniqueID("app")
	a.runApp(app)
	a.ctr("task", "exec", "--exec-id", "mark", app, "/bin/sh", "-c", "echo carried > /marker")
	ckpt, tick := a.taskCheckpoint(app, "--exit")
	a.waitStopped(app)
	ref := reg.addr + "/ckpt/annot-" + v.dir + ":v1"
	a.cryo(t, "image", "build", "--containerd", ckpt, ref)
	pinned := pinnedRef(ref, a.imgNode.cryo(t, "image", "push", ref))

	priv := startPrivateRegistry(t)
	privRef := priv.addr + "/ckpt/private:v1"
	a.cryo(t, "image", "build", "--containerd", ckpt, privRef)
	privPinned := pinnedRef(privRef, a.imgNode.cryo(t, "image", "push", "--authfile", priv.authFile(t, t.TempDir(), privatePassword), privRef))

	b := newAnnotNode(t, v, reg.addr, priv.addr)
	b.ctr("images", "import", "--all-platforms", filepath.Join(a.dir, "image", "image.tar"))

	step(t, "restored", func(t *testing.T) { b.restoresFromImage(t, pinned, tick) })
	step(t, "policy", func(t *testing.T) { b.policyRefusals(t, pinned, ref) })
	step(t, "deleted before start", func(t *testing.T) { b.deletedBeforeStart(t, pinned) })
	step(t, "missing image", func(t *testing.T) { b.missingImage(t, reg.addr+"/ckpt/none@"+godigest.FromString("none").String()) })
	step(t, "bare process image", func(t *testing.T) { b.processImage(t, a.imgNode, reg.addr+"/ckpt/bare:v1") })
	step(t, "wrong GPU", func(t *testing.T) { b.wrongGPU(t, pinned) })
	step(t, "private registry", func(t *testing.T) { b.privateRegistry(t, priv, privPinned, tick) })
	step(t, "corrupt image", func(t *testing.T) { b.corruptImage(t, pinned) })
}

// step runs one part of the test and logs its time.
func step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	began := time.Now()
	fn(t)
	t.Logf("%s: %s", name, time.Since(began).Round(time.Millisecond))
}

// newAnnotated creates a container of the app's ordinary image on the cryo
// runtime, given GPU 0 (a stand-in node), with annotations on its spec.
func (n *annotNode) newAnnotated(t *testing.T, id string, ann map[string]string) client.Container {
	t.Helper()
	ctx := namespacedCtx()
	img, err := n.client.GetImage(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.client.NewContainer(ctx, id, client.WithImage(img), client.WithNewSnapshot(id+"-snap", img),
		client.WithRuntime(cryoRuntime, nil),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("/bin/fakecuda-app", "100"), withStandIns(0), oci.WithAnnotations(ann)))
	if err != nil {
		t.Fatalf("new container %s: %v", id, err)
	}
	t.Cleanup(func() { n.remove(id) })
	return c
}

// newTask creates the container's task with its output in logPath(id).
func (n *annotNode) newTask(c client.Container) (client.Task, error) {
	_ = os.MkdirAll(filepath.Join(n.dir, "logs"), 0o755)
	return c.NewTask(namespacedCtx(), cio.LogFile(n.logPath(c.ID())))
}

// privateRegistry: the shim pulls with the node's credentials, from the
// auth file its daemon's environment names, only when the policy allows
// the namespace to use them; otherwise, or without them, or with wrong
// ones, Create fails at the pull.
func (n *annotNode) privateRegistry(t *testing.T, reg *privateRegistry, ref string, before int) {
	ann := map[string]string{imagerestore.AnnImage: ref}
	reg.authFile(t, filepath.Dir(n.auth), privatePassword)
	n.setNodeCredentials(t, false)
	_, err := n.refused(t, "anonymous", ann)
	wantIn(t, err.Error(), "step pull the checkpoint image "+ref, "anonymously", "use_node_credentials")
	n.setNodeCredentials(t, true)

	if err := os.Remove(n.auth); err != nil {
		t.Fatal(err)
	}
	_, err = n.refused(t, "noauth", ann)
	wantIn(t, err.Error(), "step pull the checkpoint image "+ref, "REGISTRY_AUTH_FILE")
	reg.authFile(t, filepath.Dir(n.auth), "wrong")
	_, err = n.refused(t, "badauth", ann)
	wantIn(t, err.Error(), "step pull the checkpoint image "+ref)

	reg.authFile(t, filepath.Dir(n.auth), privatePassword)
	id := uniqueID("private")
	task, err := n.newTask(n.newAnnotated(t, id, ann))
	if err != nil {
		t.Fatalf("create with the node's credentials: %v\n%s", err, lastLines(n.log(), 30))
	}
	if err := task.Start(namespacedCtx()); err != nil {
		t.Fatalf("start: %v", err)
	}
	n.waitTicks(id, 3)
	assertContinues(t, n.logPath(id), before)
	wantEmpty(t, n.work, "a restore from a private registry")
}

// restoresFromImage: the task's first tick follows the checkpoint's last,
// the rootfs change is there, and the work directory is gone.
func (n *annotNode) restoresFromImage(t *testing.T, ref string, before int) {
	id := uniqueID("restored")
	c := n.newAnnotated(t, id, map[string]string{imagerestore.AnnImage: ref})
	task, err := n.newTask(c)
	if err != nil {
		t.Fatalf("create from checkpoint image %s: %v\n%s", ref, err, lastLines(n.log(), 30))
	}
	if err := task.Start(namespacedCtx()); err != nil {
		t.Fatalf("start: %v\n%s", err, lastLines(n.log(), 30))
	}
	n.waitTicks(id, 5)
	assertContinues(t, n.logPath(id), before)
	if got := strings.TrimSpace(n.ctr("task", "exec", "--exec-id", "cat", id, "/bin/cat", "/marker")); got != "carried" {
		t.Errorf("rootfs diff not applied: /marker = %q", got)
	}
	if st := n.taskStatus(id); st != client.Running {
		t.Errorf("restored task is %s", st)
	}
	wantIn(t, n.log(), "cryo: checkpoint image unpacked and verified", "pulled=true")
	wantDigestLogged(t, n.log(), ref)
	wantEmpty(t, n.work, "a restore from an image")
}

// deletedBeforeStart: a task created from a digest-pinned reference and
// deleted without a start leaves no work directory.
func (n *annotNode) deletedBeforeStart(t *testing.T, ref string) {
	id := uniqueID("unstarted")
	task, err := n.newTask(n.newAnnotated(t, id, map[string]string{imagerestore.AnnImage: ref}))
	if err != nil {
		t.Fatalf("create from %s: %v\n%s", ref, err, lastLines(n.log(), 30))
	}
	if entries, _ := os.ReadDir(n.work); len(entries) != 1 {
		t.Errorf("a created restore has %d work directories, want 1", len(entries))
	}
	if _, err := task.Delete(namespacedCtx()); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wantEmpty(t, n.work, "a restore deleted before its start")
}

// processImage: a checkpoint of a bare process tree has no container to
// restore into, and is refused by its kind.
func (n *annotNode) processImage(t *testing.T, builder *imgNode, tag string) {
	_, dir, _ := checkpointApp(t, fakeDriverEnv(t, ""))
	builder.cryo(t, "image", "build", dir, tag)
	ref := pinnedRef(tag, builder.cryo(t, "image", "push", tag))
	_, err := n.refused(t, "bare", map[string]string{imagerestore.AnnImage: ref})
	wantIn(t, err.Error(), "step check the checkpoint image "+ref, "bare process tree", "remedy: ")
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("error class of a bare process image: %v", err)
	}
}

// refused creates a task that must fail at Create; it returns the error.
func (n *annotNode) refused(t *testing.T, prefix string, ann map[string]string) (string, error) {
	t.Helper()
	id := uniqueID(prefix)
	_, err := n.newTask(n.newAnnotated(t, id, ann))
	if err == nil {
		t.Fatalf("%s: the task was created\n%s", id, lastLines(n.log(), 30))
	}
	n.assertNoTask(id)
	wantEmpty(t, n.work, "a refused restore from an image")
	t.Logf("%s: %v", prefix, err)
	return id, err
}

func (n *annotNode) missingImage(t *testing.T, ref string) {
	_, err := n.refused(t, "missing", map[string]string{imagerestore.AnnImage: ref, imagerestore.AnnCRIContainerName: "main"})
	wantIn(t, err.Error(), "restore of container main (", "step pull the checkpoint image "+ref, "remedy: ", "nothing was restored")
	if !errdefs.IsNotFound(err) {
		t.Errorf("error class of a missing image: %v", err)
	}
}

// wrongGPU: the image is fine, this host's GPU is not the checkpoint's.
func (n *annotNode) wrongGPU(t *testing.T, ref string) {
	if err := os.WriteFile(n.gpusFile(), []byte(a100+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(n.gpusFile())
	_, err := n.refused(t, "wronggpu", map[string]string{imagerestore.AnnImage: ref})
	assertGPURefusal(t, "annotation", err.Error())
	if !errdefs.IsFailedPrecondition(err) {
		t.Errorf("error class of a wrong GPU: %v", err)
	}
}

// corruptImage: a layer of the image in the node's store is damaged, so
// the unpack refuses it (a pinned image that the store has is not pulled
// again); with the fresh policy the container starts from its
// image instead.
func (n *annotNode) corruptImage(t *testing.T, ref string) {
	flipByte(t, biggestLayer(t, n.store, ref))
	ann := map[string]string{imagerestore.AnnImage: ref}
	_, err := n.refused(t, "corrupt", ann)
	wantIn(t, err.Error(), "step unpack the checkpoint image "+ref, "remedy: ")
	// containerd 1.7's client has no class for gRPC's DataLoss: it says
	// "unknown", with the shim's "data loss:" kept in the message.
	if !errdefs.IsDataLoss(err) && !(n.v.configVersion == 2 && strings.Contains(err.Error(), "data loss: restore of")) {
		t.Errorf("error class of a corrupt image: %v", err)
	}

	ann[imagerestore.AnnOnFailure] = string(imagerestore.PolicyFresh)
	id := uniqueID("fresh")
	task, err := n.newTask(n.newAnnotated(t, id, ann))
	if err != nil {
		t.Fatalf("fresh policy: create failed: %v\n%s", err, lastLines(n.log(), 30))
	}
	if err := task.Start(namespacedCtx()); err != nil {
		t.Fatalf("fresh policy: start: %v", err)
	}
	n.waitTicks(id, 3)
	if first := ctrdTicks(t, n.logPath(id))[0]; first > 1 {
		t.Errorf("fresh policy: first tick %d, want a fresh start", first)
	}
	wantIn(t, n.log(), "starting the container fresh")
	wantEmpty(t, n.work, "a restore refused under the fresh policy")
}

// biggestLayer is the path of ref's biggest layer in an image store.
func biggestLayer(t *testing.T, store, ref string) string {
	t.Helper()
	var index ocispec.Index
	readJSON(t, filepath.Join(store, "index.json"), &index)
	for _, d := range index.Manifests {
		if d.Annotations[ocispec.AnnotationRefName] != ref {
			continue
		}
		var m ocispec.Manifest
		readJSON(t, filepath.Join(store, "blobs", "sha256", d.Digest.Encoded()), &m)
		biggest := m.Layers[0]
		for _, l := range m.Layers {
			if l.Size > biggest.Size {
				biggest = l
			}
		}
		return filepath.Join(store, "blobs", "sha256", biggest.Digest.Encoded())
	}
	t.Fatalf("%s is not in the store %s", ref, store)
	return ""
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// privatePassword is the test user's password; privateHash is its bcrypt
// hash, as docker-registry's htpasswd file wants it.
const (
	privateUser     = "cryo"
	privatePassword = "cryo-secret"
	privateHash     = "$2a$04$PtSLPXjuQ2UDixFU2wTytuLk3ZPLw7waAcUCA2yEObPRi9MTQ/3QO"
)

// privateRegistry is a docker-registry on loopback that wants a user and
// password (htpasswd) for every request.
type privateRegistry struct{ *imgRegistry }

func startPrivateRegistry(t *testing.T) *privateRegistry {
	t.Helper()
	dir := t.TempDir()
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(privateUser+":"+privateHash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &privateRegistry{startRegistryWith(t, "auth:\n  htpasswd:\n    realm: cryo-test\n    path: "+htpasswd+"\n")}
}

// authFile writes dir/auth.json with the test user and password for this
// registry, as `docker login` would, and returns its path.
func (r *privateRegistry) authFile(t *testing.T, dir, password string) string {
	t.Helper()
	token := base64.StdEncoding.EncodeToString([]byte(privateUser + ":" + password))
	path := filepath.Join(dir, "auth.json")
	data := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, r.addr, token)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
