package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// importedPID is the pid that `cryo restore` printed last in out.
func importedPID(t *testing.T, out string) int {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	n, err := strconv.Atoi(strings.TrimSpace(lines[len(lines)-1]))
	if err != nil {
		t.Fatalf("cryo restore printed no pid:\n%s", out)
	}
	return n
}

// workDirsGone fails if a restore left a work directory in base.
func workDirsGone(t *testing.T, base string) {
	t.Helper()
	e, _ := os.ReadDir(base)
	for _, d := range e {
		if strings.HasPrefix(d.Name(), "import-") {
			t.Fatalf("the import's work directory %s stayed", filepath.Join(base, d.Name()))
		}
	}
}

// TestRestoreImportArchive: the tar that `cryo image export` writes of a
// bare checkpoint restores with `cryo restore --import` and, with a note,
// with `--dir`; `--image` of it names --import. The private work
// directory goes afterwards, and the restored app carries on ticking.
func TestRestoreImportArchive(t *testing.T) {
	harness.RequireRoot(t)
	base := filepath.Join(t.TempDir(), "restore")
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_RESTORE_DIR="+base)
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	// CRIU restores the app's output file at the size it had: each
	// restore below starts from it.
	out := filepath.Join(p.Dir, "out")
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	tar := filepath.Join(t.TempDir(), "x.tar")
	harness.BareCryo(t, env, "image", "export", img, tar)
	os.RemoveAll(img)

	_, stderr, code := harness.CryoSplit(t, env, "restore", "--image", tar)
	if code != 2 || !strings.Contains(stderr, "remedy: `cryo restore --import "+tar+"` for a checkpoint archive") {
		t.Fatalf("restore --image of a tar: exit %d, want 2 and a remedy naming --import:\n%s", code, stderr)
	}

	for _, flag := range []string{"--import", "--dir"} {
		if err := os.Truncate(out, fi.Size()); err != nil {
			t.Fatal(err)
		}
		out := harness.BareCryo(t, env, "restore", flag, tar)
		t.Logf("restore %s:\n%s", flag, out)
		if pid := importedPID(t, out); pid != p.PID {
			t.Fatalf("restored as pid %d, want %d", pid, p.PID)
		}
		if flag == "--dir" && !strings.Contains(out, "is a file, not a checkpoint directory: restoring it as `cryo restore --import "+tar+"`") {
			t.Fatalf("restore --dir of a tar does not say what it does:\n%s", out)
		}
		last := p.LastTick(t)
		p.WaitTicks(t, last+2)
		workDirsGone(t, base)
		killDumped(t, p)
	}

	dir := t.TempDir()
	_, stderr, code = harness.CryoSplit(t, env, "restore", "--import", dir)
	if code != 2 || !strings.Contains(stderr, "remedy: `cryo restore --dir "+dir+"`") {
		t.Fatalf("restore --import of a directory: exit %d:\n%s", code, stderr)
	}
}

// TestRestoreImportContainerd: the export tar of a containerd checkpoint
// image restores with `cryo restore --import` into containerd, as the
// checkpointed container, and the work directory (with the private store
// it built there) goes afterwards.
func TestRestoreImportContainerd(t *testing.T) {
	n := harness.NewCtrdNode(t, harness.CtrdVersions[1])
	n.ImportTestImage()
	app := harness.UniqueID("app")
	n.RunApp(app)
	ck := "localhost/ckpt/import-ck:1"
	n.ContainerCheckpoint(app, ck)
	n.Remove(app)
	ref := "localhost/ckpt/import:1"
	n.Cryo(t, "image", "build", "--containerd", ck, ref)
	tar := filepath.Join(t.TempDir(), "ctrd.tar")
	n.ImgNode.Cryo(t, "image", "export", ref, tar)

	base := filepath.Join(t.TempDir(), "restore")
	n.ImgNode.Env = append(n.ImgNode.Env, "CRYO_RESTORE_DIR="+base)
	out := n.Cryo(t, "restore", "--import", tar, "--containerd", "--gpus", harness.StandInNode(t, 0), "--log", n.LogPath(app))
	t.Logf("%s", out)
	harness.WantIn(t, out, "restored container "+app+" ")
	n.WaitTicksIn(n.LogPath(app), 3)
	workDirsGone(t, base)
	n.Remove(app)
}
