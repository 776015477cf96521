package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/opencontainers/runtime-spec/specs-go"
)

func TestImageRestoreIgnoresImageConfig(t *testing.T) {
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) {
			node := harness.NewCtrdNode(t, v)
			node.ImportTestImage()
			n := func(t *testing.T) *harness.CtrdNode {
				return &harness.CtrdNode{Daemon: node.With(t), ImgNode: node.ImgNode}
			}
			t.Run("CraftedSpec", func(t *testing.T) { testCraftedSpecIgnored(t, n(t), v) })
			t.Run("MissingMount", func(t *testing.T) { testMissingMountNamed(t, n(t), v) })
			t.Run("HostNetwork", func(t *testing.T) { testHostNetworkGranted(t, n(t), v) })
		})
	}
}

// attack is what the crafted image asks for, to look for afterwards.
type attack struct {
	ref     string
	markers []string // files the hooks would create on the host
	hostDir string   // the host directory it would bind-mount
}

const (
	attackMountDst = "/hostroot"
	attackDevice   = "/dev/hostmem"
	attackCgroup   = "/cryo-attacker"
	attackRuntime  = "io.containerd.runc.v2"
)

var attackAnnotations = map[string]string{
	"org.criu.config":  "/tmp/attacker-criu.conf",
	"cdi.k8s.io/cryo":  "nvidia.com/gpu=all",
	"cryo.io/attacker": "1",
}

func testCraftedSpecIgnored(t *testing.T, n *harness.CtrdNode, v harness.CtrdVersion) {
	app, clone := harness.UniqueID("app"), harness.UniqueID("clone")
	n.RunApp(app)
	ckpt, tick := n.TaskCheckpoint(app, "--exit")
	n.WaitStopped(app)
	ref := "localhost/ckpt/noconfig-" + v.Dir + ":1"
	n.Cryo(t, "image", "build", "--containerd", ckpt, ref)
	a := craftImage(t, n, ref, "localhost/ckpt/noconfig-"+v.Dir+":crafted")

	log := n.LogPath(clone)
	// The app ran with GPU 0's stand-in node: --gpus hands it over, as a
	// device plugin would, and the crafted device must still not come.
	out := n.Cryo(t, "image", "restore", "--containerd", "--name", clone, "--log", log, "--gpus", harness.StandInNode(t, 0), a.ref)
	harness.WantIn(t, out, "restored container "+clone, "taken on runtime "+attackRuntime+"; restoring on "+harness.CryoRuntime)
	// The runtime runs hooks while it creates the task: by now they would have.
	for _, m := range a.markers {
		if _, err := os.Stat(m); err == nil {
			t.Errorf("a hook of the image ran on the host: %s exists", m)
		}
	}
	checkFreshSpec(t, n, clone, a)
	if out, err := n.CtrErr("task", "exec", "--exec-id", "peek", clone, "/bin/cat", attackMountDst+"/secret"); err == nil {
		t.Errorf("the container reads the host directory %s: %q", a.hostDir, out)
	}
	n.WaitTicksIn(log, 5)
	if first := harness.CtrdTicks(t, log)[0]; first <= tick {
		t.Fatalf("restored app printed tick %d first, want just after %d (a continuation, not a restart)", first, tick)
	}
	n.Remove(clone)
	n.Remove(app)
}

// craftImage unpacks ref with cryo, rewrites its spec and runtime as an
// attacker would, and builds the result as crafted with cryo.
func craftImage(t *testing.T, n *harness.CtrdNode, ref, crafted string) attack {
	dir := filepath.Join(t.TempDir(), "unpacked")
	n.ImgNode.Cryo(t, "image", "unpack", ref, dir)
	marks := t.TempDir()
	a := attack{ref: crafted, hostDir: t.TempDir(),
		markers: []string{filepath.Join(marks, "prestart"), filepath.Join(marks, "createRuntime")}}
	if err := os.WriteFile(filepath.Join(a.hostDir, "secret"), []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	harness.ReadJSON(t, filepath.Join(dir, "spec.dump"), &s)
	touch := func(m string) specs.Hook {
		return specs.Hook{Path: "/bin/sh", Args: []string{"sh", "-c", "touch " + m}}
	}
	//lint:ignore SA1019 the attack names the legacy prestart hook too, which runc still runs
	s.Hooks = &specs.Hooks{Prestart: []specs.Hook{touch(a.markers[0])}, CreateRuntime: []specs.Hook{touch(a.markers[1])}}
	s.Mounts = append(s.Mounts, specs.Mount{Destination: attackMountDst, Type: "bind", Source: a.hostDir, Options: []string{"rbind", "rw"}})
	s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: attackDevice, Type: "c", Major: 1, Minor: 1})
	s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Access: "rwm"})
	s.Linux.CgroupsPath = attackCgroup
	s.Annotations = attackAnnotations
	ctx := harness.NamespacedCtx()
	for _, o := range []oci.SpecOpts{oci.WithAllKnownCapabilities, oci.WithHostNamespace(specs.NetworkNamespace)} {
		if err := o(ctx, nil, nil, &s); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON(t, filepath.Join(dir, "spec.dump"), s)
	var meta map[string]any
	harness.ReadJSON(t, filepath.Join(dir, "config.dump"), &meta)
	meta["runtime"] = attackRuntime
	writeJSON(t, filepath.Join(dir, "config.dump"), meta)
	harness.WantIn(t, n.ImgNode.Cryo(t, "image", "build", dir, crafted), "built "+crafted)
	harness.WantIn(t, n.ImgNode.Cryo(t, "inspect", crafted), "Kind:         containerd")
	return a
}

// checkFreshSpec reads the restored container back from containerd: its
// spec and runtime must be what `ctr run` of the base image would give.
func checkFreshSpec(t *testing.T, n *harness.CtrdNode, id string, a attack) {
	ctx := harness.NamespacedCtx()
	c, err := n.Client.LoadContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Runtime.Name != harness.CryoRuntime {
		t.Errorf("runtime %s, want %s", info.Runtime.Name, harness.CryoRuntime)
	}
	s, err := c.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 a legacy prestart hook would run too, so it counts
	if h := s.Hooks; h != nil && len(h.Prestart)+len(h.CreateRuntime)+len(h.CreateContainer)+len(h.StartContainer)+len(h.Poststart)+len(h.Poststop) > 0 {
		t.Errorf("the spec has hooks: %+v", *h)
	}
	for _, m := range s.Mounts {
		if m.Source == a.hostDir || m.Destination == attackMountDst {
			t.Errorf("the spec mounts %s at %s", m.Source, m.Destination)
		}
	}
	for _, d := range s.Linux.Devices {
		if d.Path == attackDevice {
			t.Errorf("the spec has the device %s (%d:%d)", d.Path, d.Major, d.Minor)
		}
	}
	for _, r := range s.Linux.Resources.Devices {
		if r.Allow && r.Major == nil && r.Minor == nil {
			t.Errorf("the spec allows every device: %+v", r)
		}
	}
	if !slices.ContainsFunc(s.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
		return ns.Type == specs.NetworkNamespace && ns.Path == ""
	}) {
		t.Errorf("the container has no network namespace of its own: %+v", s.Linux.Namespaces)
	}
	if want := "/" + harness.TestNamespace + "/" + id; s.Linux.CgroupsPath != want {
		t.Errorf("cgroup %s, want %s", s.Linux.CgroupsPath, want)
	}
	for k := range attackAnnotations {
		if v, ok := s.Annotations[k]; ok {
			t.Errorf("the spec carries the annotation %s=%s", k, v)
		}
	}
	def, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	got, want := s.Process.Capabilities, def.Process.Capabilities
	if !slices.Equal(got.Bounding, want.Bounding) || !slices.Equal(got.Effective, want.Effective) || !slices.Equal(got.Permitted, want.Permitted) {
		t.Errorf("capabilities %v, want containerd's default %v", got.Bounding, want.Bounding)
	}
}

// testMissingMountNamed: a checkpoint taken with a bind mount needs that
// mount at restore. Without it, CRIU's refusal comes back naming the
// mount and --mount, and nothing is left in containerd; with --mount the
// process goes on.
func testMissingMountNamed(t *testing.T, n *harness.CtrdNode, v harness.CtrdVersion) {
	app, clone := harness.UniqueID("mnt"), harness.UniqueID("mnt-clone")
	data := t.TempDir()
	n.RunApp(app, oci.WithMounts([]specs.Mount{{Type: "bind", Source: data, Destination: "/data", Options: []string{"rbind", "rw"}}}))
	ckpt, tick := n.TaskCheckpoint(app, "--exit")
	n.WaitStopped(app)
	ref := "localhost/ckpt/mount-" + v.Dir + ":1"
	n.Cryo(t, "image", "build", "--containerd", ckpt, ref)

	gpu0 := harness.StandInNode(t, 0)
	out := n.CryoFails(t, "image", "restore", "--containerd", "--name", clone, "--gpus", gpu0, ref)
	harness.WantIn(t, out, "restore of "+clone+" failed", "mount at /data", "remedy: ", "--mount type=bind,src=HOST-DIR,dst=/data")
	t.Logf("without the mount: %s", harness.LastLines(out, 1))
	if _, err := n.Client.LoadContainer(harness.NamespacedCtx(), clone); err == nil {
		t.Errorf("the failed restore left container %s behind", clone)
	}
	log := n.LogPath(clone)
	out = n.Cryo(t, "image", "restore", "--containerd", "--name", clone, "--log", log,
		"--mount", "type=bind,src="+data+",dst=/data", "--gpus", gpu0, ref)
	harness.WantIn(t, out, "restored container "+clone)
	n.WaitTicksIn(log, 3)
	harness.AssertContinues(t, log, tick)
	n.Remove(clone)
	n.Remove(app)
}

// testHostNetworkGranted: a container that shared the host's network
// namespace comes back in it (CRIU does not restore a namespace the
// process shared with it), so its restore needs the grant again. Without
// --net-host it is refused before containerd sees it, naming the flag; with
// it the process goes on.
func testHostNetworkGranted(t *testing.T, n *harness.CtrdNode, v harness.CtrdVersion) {
	app, clone := harness.UniqueID("hostnet"), harness.UniqueID("hostnet-clone")
	n.RunApp(app, oci.WithHostNamespace(specs.NetworkNamespace))
	ckpt, tick := n.TaskCheckpoint(app, "--exit")
	n.WaitStopped(app)
	ref := "localhost/ckpt/hostnet-" + v.Dir + ":1"
	n.Cryo(t, "image", "build", "--containerd", ckpt, ref)

	gpu0 := harness.StandInNode(t, 0)
	out := n.CryoFails(t, "image", "restore", "--containerd", "--name", clone, "--gpus", gpu0, ref)
	harness.WantIn(t, out, "shared the host's network namespace", "nothing was restored", "remedy: grant it again with --net-host")
	if _, err := n.Client.LoadContainer(harness.NamespacedCtx(), clone); err == nil {
		t.Errorf("the refused restore left container %s behind", clone)
	}
	log := n.LogPath(clone)
	out = n.Cryo(t, "image", "restore", "--containerd", "--net-host", "--name", clone, "--log", log, "--gpus", gpu0, ref)
	harness.WantIn(t, out, "restored container "+clone)
	n.WaitTicksIn(log, 3)
	harness.AssertContinues(t, log, tick)
	n.Remove(clone)
	n.Remove(app)
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
