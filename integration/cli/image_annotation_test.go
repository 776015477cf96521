package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	godigest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestImageAnnotation(t *testing.T) {
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) {
			began := time.Now()
			testImageAnnotation(t, v)
			t.Logf("%s took %s", v.Name, time.Since(began).Round(time.Millisecond))
		})
	}
}

// annotNode is node B: a containerd whose shims have their own image
// store and work directory base (from the daemon's environment, which the
// shims inherit).
type annotNode struct {
	*harness.Daemon
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
func newAnnotNode(t *testing.T, v harness.CtrdVersion, regs ...string) *annotNode {
	dir := t.TempDir()
	n := &annotNode{store: filepath.Join(dir, "store"), work: filepath.Join(dir, "restore"), auth: filepath.Join(dir, "auth.json")}
	t.Setenv("CRYO_IMAGE_STORE", n.store)
	t.Setenv("CRYO_RESTORE_DIR", n.work)
	t.Setenv("REGISTRY_AUTH_FILE", n.auth)
	var repos []string
	for _, r := range regs {
		repos = append(repos, r+"/ckpt/")
	}
	n.pol = harness.AllowOnly("", repos, regs...)
	n.setNodeCredentials(t, true)
	n.Daemon = harness.StartDaemon(t, v)
	return n
}

// setNodeCredentials rewrites the policy with namespace "" allowed the
// node's credentials or not; the next restore reads it.
func (n *annotNode) setNodeCredentials(t *testing.T, use bool) {
	rule := n.pol.Namespaces[""]
	rule.UseNodeCredentials = use
	n.pol.Namespaces[""] = rule
	if n.policy == "" {
		n.policy = harness.UsePolicy(t, n.pol)
		return
	}
	harness.WriteAnnotationPolicy(t, n.policy, n.pol)
}

func testImageAnnotation(t *testing.T, v harness.CtrdVersion) {
	reg := harness.StartRegistry(t)
	a := harness.NewCtrdNode(t, v)
	a.ImportTestImage()
	app := harness.UniqueID("app")
	a.RunApp(app)
	a.Ctr("task", "exec", "--exec-id", "mark", app, "/bin/sh", "-c", "echo carried > /marker")
	ckpt, tick := a.TaskCheckpoint(app, "--exit")
	a.WaitStopped(app)
	ref := reg.Addr + "/ckpt/annot-" + v.Dir + ":v1"
	a.Cryo(t, "image", "build", "--containerd", ckpt, ref)
	pinned := harness.PinnedRef(ref, a.ImgNode.Cryo(t, "image", "push", ref))

	priv := harness.StartPrivateRegistry(t)
	privRef := priv.Addr + "/ckpt/private:v1"
	a.Cryo(t, "image", "build", "--containerd", ckpt, privRef)
	privPinned := harness.PinnedRef(privRef, a.ImgNode.Cryo(t, "image", "push", "--authfile", priv.AuthFile(t, t.TempDir(), harness.PrivatePassword), privRef))

	b := newAnnotNode(t, v, reg.Addr, priv.Addr)
	b.Ctr("images", "import", "--all-platforms", filepath.Join(a.Dir, "image", "image.tar"))

	step(t, "restored", func(t *testing.T) { b.restoresFromImage(t, pinned, tick) })
	step(t, "policy", func(t *testing.T) { b.policyRefusals(t, pinned, ref) })
	step(t, "deleted before start", func(t *testing.T) { b.deletedBeforeStart(t, pinned) })
	step(t, "missing image", func(t *testing.T) { b.missingImage(t, reg.Addr+"/ckpt/none@"+godigest.FromString("none").String()) })
	step(t, "bare process image", func(t *testing.T) { b.processImage(t, a.ImgNode, reg.Addr+"/ckpt/bare:v1") })
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
	ctx := harness.NamespacedCtx()
	img, err := n.Client.GetImage(ctx, harness.TestImage)
	if err != nil {
		t.Fatal(err)
	}
	c, err := n.Client.NewContainer(ctx, id, client.WithImage(img), client.WithNewSnapshot(id+"-snap", img),
		client.WithRuntime(harness.CryoRuntime, nil),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("/bin/fakecuda-app", "100"), harness.WithStandIns(0), oci.WithAnnotations(ann)))
	if err != nil {
		t.Fatalf("new container %s: %v", id, err)
	}
	t.Cleanup(func() { n.Remove(id) })
	return c
}

// newTask creates the container's task with its output in logPath(id).
func (n *annotNode) newTask(c client.Container) (client.Task, error) {
	_ = os.MkdirAll(filepath.Join(n.Dir, "logs"), 0o755)
	return c.NewTask(harness.NamespacedCtx(), cio.LogFile(n.LogPath(c.ID())))
}

// PrivateRegistry: the shim pulls with the node's credentials, from the
// auth file its daemon's environment names, only when the policy allows
// the namespace to use them; otherwise, or without them, or with wrong
// ones, Create fails at the pull.
func (n *annotNode) privateRegistry(t *testing.T, reg *harness.PrivateRegistry, ref string, before int) {
	ann := map[string]string{imagerestore.AnnImage: ref}
	reg.AuthFile(t, filepath.Dir(n.auth), harness.PrivatePassword)
	n.setNodeCredentials(t, false)
	_, err := n.Refused(t, "anonymous", ann)
	harness.WantIn(t, err.Error(), "step pull the checkpoint image "+ref, "anonymously", "use_node_credentials")
	n.setNodeCredentials(t, true)

	if err := os.Remove(n.auth); err != nil {
		t.Fatal(err)
	}
	_, err = n.Refused(t, "noauth", ann)
	harness.WantIn(t, err.Error(), "step pull the checkpoint image "+ref, "REGISTRY_AUTH_FILE")
	reg.AuthFile(t, filepath.Dir(n.auth), "wrong")
	_, err = n.Refused(t, "badauth", ann)
	harness.WantIn(t, err.Error(), "step pull the checkpoint image "+ref)

	reg.AuthFile(t, filepath.Dir(n.auth), harness.PrivatePassword)
	id := harness.UniqueID("private")
	task, err := n.newTask(n.newAnnotated(t, id, ann))
	if err != nil {
		t.Fatalf("create with the node's credentials: %v\n%s", err, harness.LastLines(n.Log(), 30))
	}
	if err := task.Start(harness.NamespacedCtx()); err != nil {
		t.Fatalf("start: %v", err)
	}
	n.WaitTicks(id, 3)
	harness.AssertContinues(t, n.LogPath(id), before)
	harness.WantEmpty(t, n.work, "a restore from a private registry")
}

// restoresFromImage: the task's first tick follows the checkpoint's last,
// the rootfs change is there, and the work directory is gone.
func (n *annotNode) restoresFromImage(t *testing.T, ref string, before int) {
	id := harness.UniqueID("restored")
	c := n.newAnnotated(t, id, map[string]string{imagerestore.AnnImage: ref})
	task, err := n.newTask(c)
	if err != nil {
		t.Fatalf("create from checkpoint image %s: %v\n%s", ref, err, harness.LastLines(n.Log(), 30))
	}
	if err := task.Start(harness.NamespacedCtx()); err != nil {
		t.Fatalf("start: %v\n%s", err, harness.LastLines(n.Log(), 30))
	}
	n.WaitTicks(id, 5)
	harness.AssertContinues(t, n.LogPath(id), before)
	if got := strings.TrimSpace(n.Ctr("task", "exec", "--exec-id", "cat", id, "/bin/cat", "/marker")); got != "carried" {
		t.Errorf("rootfs diff not applied: /marker = %q", got)
	}
	if st := n.TaskStatus(id); st != client.Running {
		t.Errorf("restored task is %s", st)
	}
	harness.WantIn(t, n.Log(), "cryo: checkpoint image unpacked and verified", "pulled=true")
	harness.WantDigestLogged(t, n.Log(), ref)
	harness.WantEmpty(t, n.work, "a restore from an image")
}

// deletedBeforeStart: a task created from a digest-pinned reference and
// deleted without a start leaves no work directory.
func (n *annotNode) deletedBeforeStart(t *testing.T, ref string) {
	id := harness.UniqueID("unstarted")
	task, err := n.newTask(n.newAnnotated(t, id, map[string]string{imagerestore.AnnImage: ref}))
	if err != nil {
		t.Fatalf("create from %s: %v\n%s", ref, err, harness.LastLines(n.Log(), 30))
	}
	if entries, _ := os.ReadDir(n.work); len(entries) != 1 {
		t.Errorf("a created restore has %d work directories, want 1", len(entries))
	}
	if _, err := task.Delete(harness.NamespacedCtx()); err != nil {
		t.Fatalf("delete: %v", err)
	}
	harness.WantEmpty(t, n.work, "a restore deleted before its start")
}

// processImage: a checkpoint of a bare process tree has no container to
// restore into, and is refused by its kind.
func (n *annotNode) processImage(t *testing.T, builder *harness.ImgNode, tag string) {
	_, dir, _ := harness.CheckpointApp(t, harness.FakeDriverEnv(t, ""))
	builder.Cryo(t, "image", "build", dir, tag)
	ref := harness.PinnedRef(tag, builder.Cryo(t, "image", "push", tag))
	_, err := n.Refused(t, "bare", map[string]string{imagerestore.AnnImage: ref})
	harness.WantIn(t, err.Error(), "step check the checkpoint image "+ref, "bare process tree", "remedy: ")
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("error class of a bare process image: %v", err)
	}
}

// refused creates a task that must fail at Create; it returns the error.
func (n *annotNode) Refused(t *testing.T, prefix string, ann map[string]string) (string, error) {
	t.Helper()
	id := harness.UniqueID(prefix)
	_, err := n.newTask(n.newAnnotated(t, id, ann))
	if err == nil {
		t.Fatalf("%s: the task was created\n%s", id, harness.LastLines(n.Log(), 30))
	}
	n.AssertNoTask(id)
	harness.WantEmpty(t, n.work, "a refused restore from an image")
	t.Logf("%s: %v", prefix, err)
	return id, err
}

func (n *annotNode) missingImage(t *testing.T, ref string) {
	_, err := n.Refused(t, "missing", map[string]string{imagerestore.AnnImage: ref, imagerestore.AnnCRIContainerName: "main"})
	harness.WantIn(t, err.Error(), "restore of container main (", "step pull the checkpoint image "+ref, "remedy: ", "nothing was restored")
	if !errdefs.IsNotFound(err) {
		t.Errorf("error class of a missing image: %v", err)
	}
}

// wrongGPU: the image is fine, this host's GPU is not the checkpoint's.
func (n *annotNode) wrongGPU(t *testing.T, ref string) {
	if err := os.WriteFile(n.GpusFile(), []byte(harness.A100+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(n.GpusFile())
	_, err := n.Refused(t, "wronggpu", map[string]string{imagerestore.AnnImage: ref})
	harness.AssertGPURefusal(t, "annotation", err.Error())
	if !errdefs.IsFailedPrecondition(err) {
		t.Errorf("error class of a wrong GPU: %v", err)
	}
}

// corruptImage: a layer of the image in the node's store is damaged, so
// the unpack refuses it (a pinned image that the store has is not pulled
// again); with the fresh policy the container starts from its
// image instead.
func (n *annotNode) corruptImage(t *testing.T, ref string) {
	harness.FlipByte(t, biggestLayer(t, n.store, ref))
	ann := map[string]string{imagerestore.AnnImage: ref}
	_, err := n.Refused(t, "corrupt", ann)
	harness.WantIn(t, err.Error(), "step unpack the checkpoint image "+ref, "remedy: ")
	// containerd 1.7's client has no class for gRPC's DataLoss: it says
	// "unknown", with the shim's "data loss:" kept in the message.
	if !errdefs.IsDataLoss(err) && !(n.V.ConfigVersion == 2 && strings.Contains(err.Error(), "data loss: restore of")) {
		t.Errorf("error class of a corrupt image: %v", err)
	}

	ann[imagerestore.AnnOnFailure] = string(imagerestore.PolicyFresh)
	id := harness.UniqueID("fresh")
	task, err := n.newTask(n.newAnnotated(t, id, ann))
	if err != nil {
		t.Fatalf("fresh policy: create failed: %v\n%s", err, harness.LastLines(n.Log(), 30))
	}
	if err := task.Start(harness.NamespacedCtx()); err != nil {
		t.Fatalf("fresh policy: start: %v", err)
	}
	n.WaitTicks(id, 3)
	if first := harness.CtrdTicks(t, n.LogPath(id))[0]; first > 1 {
		t.Errorf("fresh policy: first tick %d, want a fresh start", first)
	}
	harness.WantIn(t, n.Log(), "starting the container fresh")
	harness.WantEmpty(t, n.work, "a restore refused under the fresh policy")
}

// biggestLayer is the path of ref's biggest layer in an image store.
func biggestLayer(t *testing.T, store, ref string) string {
	t.Helper()
	var index ocispec.Index
	harness.ReadJSON(t, filepath.Join(store, "index.json"), &index)
	for _, d := range index.Manifests {
		if d.Annotations[ocispec.AnnotationRefName] != ref {
			continue
		}
		var m ocispec.Manifest
		harness.ReadJSON(t, filepath.Join(store, "blobs", "sha256", d.Digest.Encoded()), &m)
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
