package gpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criBenchCall is the deadline of the CRI calls and cryo commands that
// move the whole checkpoint: at 16 GiB they take longer than the
// kubelet's runtime request timeout (harness.CRICall).
const criBenchCall = 10 * time.Minute

// shimCRI: the Kubernetes route, through CRI as the kubelet makes its
// calls, on a CRI node of its own (containerd 2.x with its CRI plugin, a
// CNI network on loopback). The workload runs in a pod on cryo's
// RuntimeClass handler, in the pod's own network namespace as a pod
// without hostNetwork gets; CRI's CheckpointContainer writes the archive
// (the container runs on, as the kubelet's checkpoint leaves it); `cryo
// image build --runnable --base` builds it on the workload's image in a
// registry on loopback, `cryo image push` pushes it, CRI's PullImage pulls
// it by digest, and a new pod of that image is created and started, timed
// from CreateContainer to the workload's first tick. The shim's log lines
// give the restore's parts: its read of the checkpoint from containerd's
// content store, runc's restore (CRIU), the CUDA resume.
//
// It runs as a subtest, so that the node, the registry and their files
// are gone before the next route. Each copy of the checkpoint goes as soon
// as the next step has read it: containerd's (collected once CRI has
// written the archive), the archive (after the build), cryo's image store
// (after the push), the registry's (after the pull). CRI's checkpoint
// alone holds three copies at once (the shim's in containerd's content
// store, CRI's unpacked copy and the archive), two every later step.
func (b *bench) shimCRI(w *shimWorkload) {
	b.t.Run("CRI", func(t *testing.T) {
		c := *w
		c.t = t
		(&bench{t: t, path: b.path}).criRunnable(&c)
	})
}

func (b *bench) criRunnable(w *shimWorkload) {
	t := b.t
	const route = "CRI runnable"
	// The shims inherit containerd's environment: the restore's work
	// directory is the test's, on the file system of containerd's
	// content store, whose pages blobs the shim links rather than copies.
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(t.TempDir(), "restore"))
	reg := harness.StartRegistry(t)
	n := harness.BootCRINode(t, 0, w.gpu)
	if err := os.MkdirAll(n.ImageDir(), 0o755); err != nil { // where the images' archives go
		t.Fatal(err)
	}
	n.ImportImages(w.root, map[string][]string{w.image: w.args})
	base := reg.Addr + "/cryo/benchshim:test"
	n.CtrIn(harness.CRINamespace, "images", "tag", "--force", w.image, base)
	n.CtrIn(harness.CRINamespace, "images", "push", "--plain-http", base)
	n.PullImage(base)

	archive := filepath.Join(n.Dir, "checkpoint.tar")
	before, after := b.criCheckpoint(n, w, base, archive, route)
	img := reg.Addr + "/cryo/benchshim-cri:1"
	pinned := b.criBuildPush(w, base, archive, img, route)
	start := time.Now()
	n.PullImageWithin(pinned, criBenchCall)
	b.row(w.name(), w.mib, route+" pull", time.Since(start).Seconds())
	removeAll(t, reg.Storage) // containerd holds the image now

	flushDirty(t)
	p := n.NewPod("bench-cri-restored", harness.CRIHandler, nil)
	mark := len(n.Log())
	start = time.Now()
	if err := p.CreateWith(w.criConfig(p, pinned)); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
	}
	w.WaitTick(p.Output, before, 3*time.Minute)
	b.row(w.name(), w.mib, route+" restore to first output", time.Since(start).Seconds())
	w.assertContinues(p.Output, before, after)
	b.logRows(n.Log()[mark:], w, p.Container, route+" restore", criRestoreParts)
	p.Remove()
}

// criCheckpoint runs the workload in a cryo pod of image, checkpoints it
// through CRI into archive, and removes the pod once it has ticked on
// after the checkpoint. It returns the last tick before the checkpoint
// and the last one the pod printed.
func (b *bench) criCheckpoint(n *harness.CRINode, w *shimWorkload, image, archive, route string) (int, int) {
	t := b.t
	p := n.NewPod("bench-cri-source", harness.CRIHandler, nil)
	if err := p.CreateWith(w.criConfig(p, image)); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
	}
	w.WaitTick(p.Output, 0, 90*time.Second)
	cleanCache(t)
	before, mark := w.LastTick(p.Output()), len(n.Log())
	ctx, cancel := context.WithTimeout(context.Background(), criBenchCall)
	defer cancel()
	start := time.Now()
	_, err := n.Rt.CheckpointContainer(ctx, &criapi.CheckpointContainerRequest{ContainerId: p.Container, Location: archive,
		Timeout: int64(criBenchCall / time.Second)})
	if err != nil {
		t.Fatalf("CheckpointContainer: %v\n%s", err, harness.LastLines(n.Log(), 40))
	}
	b.row(w.name(), w.mib, route+" checkpoint", time.Since(start).Seconds())
	b.logRows(n.Log()[mark:], w, p.Container, route+" checkpoint", criCheckpointParts)
	if fi, err := os.Stat(archive); err == nil {
		b.row(w.name(), w.mib, route+" archive bytes", float64(fi.Size()))
	}
	// The kubelet's checkpoint leaves the container running, its CUDA
	// state resumed: the next tick verifies it.
	w.WaitTick(p.Output, before, 90*time.Second)
	after := w.LastTick(p.Output())
	p.Remove()
	collectGarbage(n, image)
	return before, after
}

// criBuildPush builds the archive into the runnable image img on base, as
// a user does, and pushes it; it returns img pinned by digest. The
// archive and cryo's image store go once read.
func (b *bench) criBuildPush(w *shimWorkload, base, archive, img, route string) string {
	t := b.t
	node := harness.NewNode(t, nil)
	cryo := harness.CryoBin(t, "cryo")
	flushDirty(t)
	start := time.Now()
	out := harness.Run(t, criBenchCall, node.Env, cryo, "image", "build", "--runnable", "--base", base, "--format", "{{.size}}", archive, img)
	b.row(w.name(), w.mib, route+" build", time.Since(start).Seconds())
	// The template prints the JSON number, which may come in e-notation.
	if size, err := strconv.ParseFloat(harness.LastLine(out), 64); err == nil {
		b.row(w.name(), w.mib, route+" image bytes with its base", size)
	} else {
		t.Logf("no size in the build's output: %v\n%s", err, out)
	}
	removeAll(t, archive)
	start = time.Now()
	out = harness.Run(t, criBenchCall, node.Env, cryo, "image", "push", img)
	b.row(w.name(), w.mib, route+" push", time.Since(start).Seconds())
	removeAll(t, node.Store)
	return harness.PinnedRef(img, out)
}

// criConfig is the pod's container of the workload, made from image: on
// the real driver GPU 0 as a device plugin gives it, on the fake one GPU
// 0's stand-in node.
func (w *shimWorkload) criConfig(p *harness.CRIPod, image string) *criapi.ContainerConfig {
	cfg := p.AppConfig(image)
	if w.gpu {
		cfg = p.GPUConfig(w.t, 0)
		cfg.Image.Image = image
	}
	cfg.Command = w.args
	return cfg
}

// assertContinues checks that the restored workload's first tick follows
// the checkpoint (after before, at most one past after, the source's last)
// and that it ticks on with its memory intact.
func (w *shimWorkload) assertContinues(get func() string, before, after int) {
	w.t.Helper()
	out := get()
	first := harness.FirstTick(out)
	if !w.gpu {
		first = harness.FakeTicks(w.t, w.name(), out)[0]
	}
	if first <= before || first > after+1 {
		w.t.Fatalf("the restored pod's first tick is %d; want one after %d (the checkpoint), at most %d", first, before, after+1)
	}
	w.WaitTick(get, first+1, 30*time.Second)
}

// collectGarbage has containerd remove now the content that no image
// holds any more: CRI's checkpoint leaves the shim's copy in the content
// store for the collector, which need not have run by the time the next
// step writes its own copy. A synchronous delete of a throwaway name of
// image runs one.
func collectGarbage(n *harness.CRINode, image string) {
	tmp := "localhost/cryo/benchshim-gc:now"
	n.CtrIn(harness.CRINamespace, "images", "tag", "--force", image, tmp)
	n.CtrIn(harness.CRINamespace, "images", "rm", "--sync", tmp)
}

func removeAll(t *testing.T, path string) {
	if err := os.RemoveAll(path); err != nil {
		t.Logf("remove %s: %v", path, err)
	}
}

// shimPart is one figure of the shim's log: field of the line with msg
// (and match, where set), in seconds for a _ms field.
type shimPart struct {
	name, msg, match, field string
}

var criCheckpointParts = []shimPart{
	{"shim total", "cryo: checkpoint done", "", "total_ms"},
	{"shim CUDA suspend", "cryo: checkpoint done", "", "cuda_suspend_ms"},
	{"shim CRIU dump", "cryo: checkpoint done", "", "criu_dump_ms"},
	{"shim CUDA resume", "cryo: checkpoint done", "", "cuda_resume_ms"},
}

var criRestoreParts = []shimPart{
	{"shim read", "cryo: checkpoint read from containerd's content store", "", "elapsed_ms"},
	{"shim linked bytes", "cryo: checkpoint read from containerd's content store", "", "linked_bytes"},
	{"shim copied bytes", "cryo: checkpoint read from containerd's content store", "", "copied_bytes"},
	{"shim check", "cryo: restore checked", "", "check_ms"},
	{"shim CRIU restore", "cryo: step done", "step=restore", "elapsed_ms"},
	{"shim CUDA resume", "cryo: step done", "step=resume", "elapsed_ms"},
	{"shim total", "cryo: restore done", "", "total_ms"},
}

// logRows records each part from the last line of log about container id
// that has it: "<what>: <part>".
func (b *bench) logRows(log string, w *shimWorkload, id, what string, parts []shimPart) {
	lines := strings.Split(log, "\n")
	for _, p := range parts {
		re := regexp.MustCompile(`\b` + p.field + `=(\d+)`)
		step := regexp.MustCompile(`\b` + regexp.QuoteMeta(p.match) + `(\s|$)`)
		var m []string
		for _, l := range lines {
			if strings.Contains(l, p.msg) && strings.Contains(l, id) && (p.match == "" || step.MatchString(l)) {
				if f := re.FindStringSubmatch(l); f != nil {
					m = f
				}
			}
		}
		if m == nil {
			b.t.Logf("no %s in the shim's %q lines", p.field, p.msg)
			continue
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		if strings.HasSuffix(p.field, "_ms") {
			v /= 1000
		}
		b.row(w.name(), w.mib, fmt.Sprintf("%s: %s", what, p.name), v)
	}
}
