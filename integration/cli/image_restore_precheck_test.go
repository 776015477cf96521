package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// refusedBeforeUnpack checks that a failed image restore named wants and
// never reached the work directory work.
func refusedBeforeUnpack(t *testing.T, out, work string, wants ...string) {
	t.Helper()
	harness.WantIn(t, out, wants...)
	if _, err := os.Stat(work); err == nil {
		t.Fatalf("the work directory %s was created: the refusal came after the unpack\n%s", work, out)
	}
	if strings.Contains(out, "work directory") {
		t.Fatalf("the restore reached its work directory before refusing:\n%s", out)
	}
}

// TestImageRestorePrecheckBare: a bare-process image whose pid is held (the
// original still runs), or whose GPUs this host lacks (by its
// annotations), is refused before the unpack.
func TestImageRestorePrecheckBare(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	store := filepath.Join(t.TempDir(), "store")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--leave-running")
	ref := "localhost:5999/precheck/app:v1"
	harness.BareCryo(t, env, "image", "build", img, ref, "--store", store, "-q")

	work := filepath.Join(t.TempDir(), "work")
	start := time.Now()
	_, stderr, code := harness.CryoSplit(t, env, "image", "restore", ref, "--store", store, "--dir", work)
	if code == 0 {
		t.Fatalf("restored while the original still runs:\n%s", stderr)
	}
	refusedBeforeUnpack(t, stderr, work, "pid "+strconv.Itoa(p.PID)+" of the checkpoint is held by", "remedy: stop")
	t.Logf("busy pid refused in %v:\n%s", time.Since(start), stderr)

	// A host of another model: the annotations say H100, this one has an
	// A100 only.
	a100 := append(append([]string{}, env...), "CRYO_FAKE_GPUS=NVIDIA A100-SXM4-80GB|GPU-a1000000-0000-4000-8000-000000000000|85520809984|8.0||0")
	killDumped(t, p)
	_, stderr, code = harness.CryoSplit(t, a100, "image", "restore", ref, "--store", store, "--dir", work)
	if code == 0 {
		t.Fatalf("restored onto an A100:\n%s", stderr)
	}
	refusedBeforeUnpack(t, stderr, work, "before unpacking", "H100", "remedy:")
	t.Logf("refused on an A100:\n%s", stderr)
}

// TestRestoreDirContainerCheckpoint: `cryo restore --dir` of a container's
// CRIU directory (`ctr task checkpoint --image-path`) says what it is and
// how to restore it, not that pid 1 should be stopped.
func TestRestoreDirContainerCheckpoint(t *testing.T) {
	harness.RequireRoot(t)
	d := harness.StartDaemon(t, harness.CtrdVersions[1])
	d.ImportTestImage()
	app := harness.UniqueID("app")
	d.RunApp(app)
	dir := filepath.Join(t.TempDir(), "ckpt")
	if out, err := d.CtrBinErr(d.CtrWithOptions(), "task", "checkpoint", "--exit", "--image-path", dir, app); err != nil {
		t.Fatalf("ctr task checkpoint --image-path %s: %v\n%s", dir, err, out)
	}
	env := harness.FakeDriverEnv(t, "")
	out := harness.BareCryoFails(t, env, "restore", "--dir", dir)
	t.Logf("%s", out)
	harness.WantIn(t, out, "a container's checkpoint", "pid 1 of its own pid namespace", "nothing was restored",
		"remedy: checkpoint the running container as an image instead: `ctr container checkpoint --task --rw CONTAINER REF`")
	notTypedRemedy(t, out)

	// An image of it would restore as a process tree and be refused
	// late: the build refuses it, and the store stays empty.
	store := filepath.Join(t.TempDir(), "store")
	out = harness.BareCryoFails(t, env, "image", "build", dir, "localhost/ckpt/imagepath:1", "--store", store)
	t.Logf("%s", out)
	harness.WantIn(t, out, "build of localhost/ckpt/imagepath:1 failed", "pid 1 of its own pid namespace",
		"an image of it would hold no container", "remedy: checkpoint the running container as an image instead: `ctr container checkpoint --task")
	notTypedRemedy(t, out)
	if ls := harness.BareCryo(t, env, "image", "ls", "--store", store, "-q"); strings.TrimSpace(ls) != "" {
		t.Fatalf("image ls after the refused build: %q", ls)
	}
}

// notTypedRemedy fails unless out's remedy is one a user can type: no Go
// code, and not to stop init.
func notTypedRemedy(t *testing.T, out string) {
	t.Helper()
	for _, bad := range []string{"stop process_api", "(pid 1)", "WithRestoreImagePath(", "NewTask("} {
		if strings.Contains(out, bad) {
			t.Fatalf("the remedy says %q:\n%s", bad, out)
		}
	}
}

// TestRestoreGPUMapNotVisible: a --gpu-map onto a GPU that the process,
// by its CUDA_VISIBLE_DEVICES, will not see is the map's fault, not the
// host's: the remedy says so.
func TestRestoreGPUMapNotVisible(t *testing.T) {
	harness.RequireRoot(t)
	host := harness.NewFakeHost(2, "5a5a5a5a")
	env := host.Env(t)
	p := harness.BareStartFakeApp(t, append(append([]string{}, env...), "CUDA_VISIBLE_DEVICES=0"), nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WaitFor(t, 10*time.Second, "the dumped process to go", func() bool { return !p.Alive() })
	out := harness.BareCryoFails(t, env, "restore", "--dir", img, "--gpu-map", host.UUIDs[0]+"="+host.UUIDs[1])
	t.Logf("%s", out)
	harness.WantIn(t, out, "will not see", "not one the process can see", "leave that pair out of --gpu-map")
	if strings.Contains(out, "restore on a host with the GPUs and driver above") {
		t.Fatalf("the remedy blames the host:\n%s", out)
	}
}

// TestImageRestoreContainerdName: a containerd checkpoint whose image is
// named unlike its container (`ctr container checkpoint app ux-ck`)
// restores, without --name, as the checkpointed container; a name in use,
// a --gpus this host lacks and a missing base image are refused before
// the unpack.
func TestImageRestoreContainerdName(t *testing.T) {
	n := harness.NewCtrdNode(t, harness.CtrdVersions[1])
	n.ImportTestImage()
	app := harness.UniqueID("app")
	n.RunApp(app)
	ck := "localhost/ckpt/ux-ck:1"
	n.ContainerCheckpoint(app, ck)
	n.Remove(app)
	ref := "localhost/ckpt/ux-image:1"
	n.Cryo(t, "image", "build", "--containerd", ck, ref)
	gpu0 := harness.StandInNode(t, 0)
	work := filepath.Join(t.TempDir(), "work")

	out := n.CryoFails(t, "image", "restore", "--containerd", "--gpus", "/dev/cryo-no-such-gpu", "--dir", work, ref)
	refusedBeforeUnpack(t, out, work, "--gpus /dev/cryo-no-such-gpu", "remedy:")

	out = n.Cryo(t, "image", "restore", "--containerd", "--gpus", gpu0, "--log", n.LogPath(app), ref)
	harness.WantIn(t, out, "restored container "+app+" ")
	n.WaitTicksIn(n.LogPath(app), 3)

	out = n.CryoFails(t, "image", "restore", "--containerd", "--gpus", gpu0, "--dir", work, ref)
	refusedBeforeUnpack(t, out, work, "container "+app+" already exists", "--name NEW")

	n.Remove(app)
	n.Ctr("images", "rm", harness.TestImage)
	out = n.CryoFails(t, "image", "restore", "--containerd", "--gpus", gpu0, "--dir", work, ref)
	refusedBeforeUnpack(t, out, work, "base image "+harness.TestImage+" is not in containerd namespace", "image pull")
}

// TestImageRestorePodmanOptions: `cryo image restore` of a Podman
// checkpoint passes Podman's global options (--root, --runroot, --runtime,
// --runtime-flag) and its restore options to every podman call: the name
// check before the unpack finds the container in that store, the restore
// runs in it, and a failed restore removes what Podman left of it.
func TestImageRestorePodmanOptions(t *testing.T) {
	p := harness.NewPodman(t)
	p.RunApp(t, "app")
	export := filepath.Join(p.Dir, "app.tar")
	p.Podman(t, "container", "checkpoint", "--export", export, "app")
	before := harness.PodmanLastTick(p.Ticks(t, "app"))
	store := filepath.Join(t.TempDir(), "store")
	ref := "localhost:5999/precheck/podman:v1"
	harness.BareCryo(t, nil, "image", "build", export, ref, "--store", store, "-q")

	storageConf := filepath.Join(p.Dir, "storage.conf")
	harness.PodmanWriteFile(t, storageConf, fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(p.Dir, "root"), filepath.Join(p.Dir, "runroot")))
	env := append(append([]string{}, p.Env...), "CONTAINERS_STORAGE_CONF="+storageConf)
	global := []string{"--root", filepath.Join(p.Dir, "root"), "--runroot", filepath.Join(p.Dir, "runroot"),
		"--runtime", harness.CryoBin(t, "cryo-runc"), "--runtime-flag", "cryo-env=" + p.EnvFile}
	restore := func(args ...string) (string, string, int) {
		return harness.CryoSplit(t, env, append(append([]string{"image", "restore", ref, "--store", store}, global...), args...)...)
	}

	// app still exists (checkpointed, exited) in that store only.
	work := filepath.Join(t.TempDir(), "work")
	_, stderr, code := restore("--dir", work)
	if code == 0 {
		t.Fatalf("restored under a name in use:\n%s", stderr)
	}
	refusedBeforeUnpack(t, stderr, work, "Podman already has a container named app", "--name NEW")

	// A runtime that cannot restore: the Created container goes.
	_, stderr, code = restore("--name", "broken", "--runtime-flag", "cryo-env=/nonexistent/cryo-runc.env")
	if code == 0 {
		t.Fatalf("restored with a broken runtime environment:\n%s", stderr)
	}
	t.Logf("failed restore:\n%s", stderr)
	harness.WantIn(t, stderr, "--runtime-flag cryo-env=/nonexistent/cryo-runc.env", "removed the container broken")
	if _, err := p.PodmanErr("container", "exists", "broken"); err == nil {
		t.Fatalf("the failed restore left container broken:\n%s", stderr)
	}

	_, stderr, code = restore("--name", "clone")
	if code != 0 {
		t.Fatalf("restore with Podman's options failed:\n%s", stderr)
	}
	if st := p.State(t, "clone"); st != "running" {
		t.Fatalf("restored container is %s", st)
	}
	p.RequireContinued(t, "clone", before)
}

// TestImageRestorePullChecksFirst: `cryo image restore --pull` checks the
// registry's manifest before it pulls: a checkpoint whose pid is held (its
// original still runs) is refused without a layer coming down.
func TestImageRestorePullChecksFirst(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	reg := harness.StartRegistry(t)
	a, b := harness.NewNode(t, env), harness.NewNode(t, env)
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--leave-running")
	ref := reg.Addr + "/precheck/pull:v1"
	a.Cryo(t, "image", "build", img, ref, "-q")
	a.Cryo(t, "image", "push", ref)

	work := filepath.Join(t.TempDir(), "work")
	out := b.CryoFails(t, "image", "restore", "--pull", "--dir", work, ref)
	refusedBeforeUnpack(t, out, work, "pid "+strconv.Itoa(p.PID)+" of the checkpoint is held by")
	if strings.Contains(out, "pull "+ref) {
		t.Fatalf("the image was pulled before the refusal:\n%s", out)
	}
	if ls := b.Cryo(t, "image", "ls", "--format", "{{.ref}}"); strings.Contains(ls, ref) {
		t.Fatalf("the refused restore left the image in the store:\n%s", ls)
	}
}
