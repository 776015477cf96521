package integration

// An image restore refuses what the image's manifest already shows to be
// impossible here before it unpacks anything: unpacking and hashing an
// image of 80 GB takes minutes. Each refusal below is shown to come before
// the unpack: the work directory given with --dir is never created, and
// cryo never says it is keeping one.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// refusedBeforeUnpack checks that a failed image restore named wants and
// never reached the work directory work.
func refusedBeforeUnpack(t *testing.T, out, work string, wants ...string) {
	t.Helper()
	wantIn(t, out, wants...)
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
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	store := filepath.Join(t.TempDir(), "store")
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img, "--leave-running")
	ref := "localhost:5999/precheck/app:v1"
	bareCryo(t, env, "image", "build", img, ref, "--store", store, "-q")

	work := filepath.Join(t.TempDir(), "work")
	start := time.Now()
	_, stderr, code := cryoSplit(t, env, "image", "restore", ref, "--store", store, "--dir", work)
	if code == 0 {
		t.Fatalf("restored while the original still runs:\n%s", stderr)
	}
	refusedBeforeUnpack(t, stderr, work, "pid "+strconv.Itoa(p.pid)+" of the checkpoint is held by", "remedy: stop")
	t.Logf("busy pid refused in %v:\n%s", time.Since(start), stderr)

	// A host of another model: the annotations say H100, this one has an
	// A100 only.
	a100 := append(append([]string{}, env...), "CRYO_FAKE_GPUS=NVIDIA A100-SXM4-80GB|GPU-a1000000-0000-4000-8000-000000000000|85520809984|8.0||0")
	killDumped(t, p)
	_, stderr, code = cryoSplit(t, a100, "image", "restore", ref, "--store", store, "--dir", work)
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
	requireRoot(t)
	d := startDaemon(t, ctrdVersions[1])
	d.importTestImage()
	app := uniqueID("app")
	d.runApp(app)
	dir := filepath.Join(t.TempDir(), "ckpt")
	if out, err := d.ctrBinErr(d.ctrWithOptions(), "task", "checkpoint", "--exit", "--image-path", dir, app); err != nil {
		t.Fatalf("ctr task checkpoint --image-path %s: %v\n%s", dir, err, out)
	}
	env := fakeDriverEnv(t, "")
	out := bareCryoFails(t, env, "restore", "--dir", dir)
	t.Logf("%s", out)
	wantIn(t, out, "a container's checkpoint", "pid 1 of its own pid namespace", "nothing was restored",
		"remedy: checkpoint the running container as an image instead: `ctr container checkpoint --task --rw CONTAINER REF`")
	notTypedRemedy(t, out)

	// An image of it would restore as a process tree and be refused
	// late: the build refuses it, and the store stays empty.
	store := filepath.Join(t.TempDir(), "store")
	out = bareCryoFails(t, env, "image", "build", dir, "localhost/ckpt/imagepath:1", "--store", store)
	t.Logf("%s", out)
	wantIn(t, out, "build of localhost/ckpt/imagepath:1 failed", "pid 1 of its own pid namespace",
		"an image of it would hold no container", "remedy: checkpoint the running container as an image instead: `ctr container checkpoint --task")
	notTypedRemedy(t, out)
	if ls := bareCryo(t, env, "image", "ls", "--store", store, "-q"); strings.TrimSpace(ls) != "" {
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
	requireRoot(t)
	host := newFakeHost(2, "5a5a5a5a")
	env := host.env(t)
	p := bareStartFakeApp(t, append(append([]string{}, env...), "CUDA_VISIBLE_DEVICES=0"), nil)
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	waitFor(t, 10*time.Second, "the dumped process to go", func() bool { return !p.alive() })
	out := bareCryoFails(t, env, "restore", "--dir", img, "--gpu-map", host.UUIDs[0]+"="+host.UUIDs[1])
	t.Logf("%s", out)
	wantIn(t, out, "will not see", "not one the process can see", "leave that pair out of --gpu-map")
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
	n := newCtrdNode(t, ctrdVersions[1])
	n.importTestImage()
	app := uniqueID("app")
	n.runApp(app)
	ck := "localhost/ckpt/ux-ck:1"
	n.containerCheckpoint(app, ck)
	n.remove(app)
	ref := "localhost/ckpt/ux-image:1"
	n.cryo(t, "image", "build", "--containerd", ck, ref)
	gpu0 := standInNode(t, 0)
	work := filepath.Join(t.TempDir(), "work")

	out := n.cryoFails(t, "image", "restore", "--containerd", "--gpus", "/dev/cryo-no-such-gpu", "--dir", work, ref)
	refusedBeforeUnpack(t, out, work, "--gpus /dev/cryo-no-such-gpu", "remedy:")

	out = n.cryo(t, "image", "restore", "--containerd", "--gpus", gpu0, "--log", n.logPath(app), ref)
	wantIn(t, out, "restored container "+app+" ")
	n.waitTicksIn(n.logPath(app), 3)

	out = n.cryoFails(t, "image", "restore", "--containerd", "--gpus", gpu0, "--dir", work, ref)
	refusedBeforeUnpack(t, out, work, "container "+app+" already exists", "--name NEW")

	n.remove(app)
	n.ctr("images", "rm", testImage)
	out = n.cryoFails(t, "image", "restore", "--containerd", "--gpus", gpu0, "--dir", work, ref)
	refusedBeforeUnpack(t, out, work, "base image "+testImage+" is not in containerd namespace", "image pull")
}

// TestImageRestorePodmanOptions: `cryo image restore` of a Podman
// checkpoint passes Podman's global options (--root, --runroot, --runtime,
// --runtime-flag) and its restore options to every podman call: the name
// check before the unpack finds the container in that store, the restore
// runs in it, and a failed restore removes what Podman left of it.
func TestImageRestorePodmanOptions(t *testing.T) {
	p := newPodman(t)
	p.runApp(t, "app")
	export := filepath.Join(p.dir, "app.tar")
	p.podman(t, "container", "checkpoint", "--export", export, "app")
	before := podmanLastTick(p.ticks(t, "app"))
	store := filepath.Join(t.TempDir(), "store")
	ref := "localhost:5999/precheck/podman:v1"
	bareCryo(t, nil, "image", "build", export, ref, "--store", store, "-q")

	storageConf := filepath.Join(p.dir, "storage.conf")
	podmanWriteFile(t, storageConf, fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(p.dir, "root"), filepath.Join(p.dir, "runroot")))
	env := append(append([]string{}, p.env...), "CONTAINERS_STORAGE_CONF="+storageConf)
	global := []string{"--root", filepath.Join(p.dir, "root"), "--runroot", filepath.Join(p.dir, "runroot"),
		"--runtime", cryoBin(t, "cryo-runc"), "--runtime-flag", "cryo-env=" + p.envFile}
	restore := func(args ...string) (string, string, int) {
		return cryoSplit(t, env, append(append([]string{"image", "restore", ref, "--store", store}, global...), args...)...)
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
	wantIn(t, stderr, "--runtime-flag cryo-env=/nonexistent/cryo-runc.env", "removed the container broken")
	if _, err := p.podmanErr("container", "exists", "broken"); err == nil {
		t.Fatalf("the failed restore left container broken:\n%s", stderr)
	}

	_, stderr, code = restore("--name", "clone")
	if code != 0 {
		t.Fatalf("restore with Podman's options failed:\n%s", stderr)
	}
	if st := p.state(t, "clone"); st != "running" {
		t.Fatalf("restored container is %s", st)
	}
	p.requireContinued(t, "clone", before)
}

// TestImageRestorePullChecksFirst: `cryo image restore --pull` checks the
// registry's manifest before it pulls: a checkpoint whose pid is held (its
// original still runs) is refused without a layer coming down.
func TestImageRestorePullChecksFirst(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	reg := startRegistry(t)
	a, b := newNode(t, env), newNode(t, env)
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img, "--leave-running")
	ref := reg.addr + "/precheck/pull:v1"
	a.cryo(t, "image", "build", img, ref, "-q")
	a.cryo(t, "image", "push", ref)

	work := filepath.Join(t.TempDir(), "work")
	out := b.cryoFails(t, "image", "restore", "--pull", "--dir", work, ref)
	refusedBeforeUnpack(t, out, work, "pid "+strconv.Itoa(p.pid)+" of the checkpoint is held by")
	if strings.Contains(out, "pull "+ref) {
		t.Fatalf("the image was pulled before the refusal:\n%s", out)
	}
	if ls := b.cryo(t, "image", "ls", "--format", "{{.ref}}"); strings.Contains(ls, ref) {
		t.Fatalf("the refused restore left the image in the store:\n%s", ls)
	}
}
