package podman

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
)

// manifestOf reads cryo-manifest.json from an exported checkpoint.
func exportedManifest(t *testing.T, export string) *manifest.Manifest {
	t.Helper()
	out := harness.Run(t, time.Minute, nil, "tar", "--zstd", "-xOf", export, "checkpoint/"+manifest.ManifestName)
	var m manifest.Manifest
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("manifest in %s: %v\n%s", export, err, out)
	}
	return &m
}

// The main path: export a checkpoint, remove the container, import it; the
// app continues where it was, and the export carries the GPU manifest.
// runc dumps and restores with the CRIU that CRYO_CRIU names, which is not
// on PATH at all.
func TestPodmanExportImport(t *testing.T) {
	criu := harness.NewLoggingCRIU(t)
	p := harness.NewPodman(t, "CRYO_CRIU="+criu.Path)
	p.RunApp(t, "app")
	export := filepath.Join(p.Dir, "app.tar.zst")
	out := p.Podman(t, "container", "checkpoint", "--export", export, "app")
	before := harness.PodmanLastTick(p.Ticks(t, "app"))
	m := exportedManifest(t, export)
	if len(m.Processes) != 1 || m.Digests == nil || len(m.Needs) == 0 {
		t.Fatalf("manifest in the export: %+v\n%s", m, out)
	}
	if !stepTakenBefore(m, "suspend", "dump") {
		t.Fatalf("CUDA was not suspended before the dump: steps %+v", m.Steps)
	}
	dumps := criu.RuncSwrks()
	if dumps == 0 {
		t.Fatalf("runc did not dump with CRYO_CRIU=%s", criu.Path)
	}
	p.Podman(t, "rm", "-f", "app")
	p.Podman(t, "container", "restore", "--import", export)
	if criu.RuncSwrks() == dumps {
		t.Fatalf("runc did not restore with CRYO_CRIU=%s", criu.Path)
	}
	if st := p.State(t, "app"); st != "running" {
		t.Fatalf("restored container is %s", st)
	}
	p.RequireContinued(t, "app", before)
	if st := p.CUDAState(t, "app"); !strings.Contains(st, "running") {
		t.Fatalf("CUDA not resumed after the restore: %s", st)
	}
}

// stepBefore reports whether step a was taken, and before step b.
func stepTakenBefore(m *manifest.Manifest, a, b string) bool {
	ia, ib := -1, -1
	for i, s := range m.Steps {
		if s.Name == a && s.Error == "" {
			ia = i
		}
		if s.Name == b {
			ib = i
		}
	}
	return ia >= 0 && ib > ia
}

// --leave-running keeps the container running with CUDA resumed; a later
// restore in place continues from the checkpoint.
func TestPodmanLeaveRunning(t *testing.T) {
	p := harness.NewPodman(t)
	p.RunApp(t, "app")
	p.Podman(t, "container", "checkpoint", "--leave-running", "app")
	if st := p.State(t, "app"); st != "running" {
		t.Fatalf("container is %s after checkpoint --leave-running", st)
	}
	p.RequireContinued(t, "app", harness.PodmanLastTick(p.Ticks(t, "app")))
	if st := p.CUDAState(t, "app"); !strings.Contains(st, "running") {
		t.Fatalf("CUDA not resumed after checkpoint --leave-running: %s", st)
	}
}

// A dump that CRIU refuses (a deleted open file larger than CRIU's ghost
// limit) leaves the container running with CUDA resumed.
func TestPodmanCRIUFailureResumes(t *testing.T) {
	p := harness.NewPodman(t)
	p.RunApp(t, "app", "busybox dd if=/dev/zero of=/tmp/big bs=1M count=2 2>/dev/null; exec 3</tmp/big; rm /tmp/big; exec /bin/fakecuda-app 100")
	out, err := p.PodmanErr("container", "checkpoint", "app")
	if err == nil {
		t.Fatalf("checkpoint succeeded despite the oversized ghost file:\n%s", out)
	}
	for _, want := range []string{"failed at step dump", "CUDA"} {
		if !strings.Contains(out, want) {
			t.Errorf("error lacks %q:\n%s", want, out)
		}
	}
	if st := p.State(t, "app"); st != "running" {
		t.Fatalf("container is %s after a failed checkpoint", st)
	}
	p.RequireContinued(t, "app", harness.PodmanLastTick(p.Ticks(t, "app")))
}

// A driver fault while suspending aborts the checkpoint before CRIU runs,
// and the container keeps running.
func TestPodmanDriverFaultResumes(t *testing.T) {
	p := harness.NewPodman(t)
	p.RunApp(t, "app")
	harness.PodmanWriteFile(t, filepath.Join(p.Faults, "checkpoint"), "error 2\n")
	out, err := p.PodmanErr("container", "checkpoint", "app")
	os.Remove(filepath.Join(p.Faults, "checkpoint"))
	if err == nil {
		t.Fatalf("checkpoint succeeded despite the driver fault:\n%s", out)
	}
	if !strings.Contains(out, "step suspend") {
		t.Errorf("error does not name the suspend step:\n%s", out)
	}
	if st := p.State(t, "app"); st != "running" {
		t.Fatalf("container is %s after a failed checkpoint", st)
	}
	p.RequireContinued(t, "app", harness.PodmanLastTick(p.Ticks(t, "app")))
}

// A flipped byte in an exported image fails the import before anything is
// restored.
func TestPodmanImportRefusesCorruptImage(t *testing.T) {
	p := harness.NewPodman(t)
	p.RunApp(t, "app")
	export := filepath.Join(p.Dir, "app.tar.zst")
	p.Podman(t, "container", "checkpoint", "--export", export, "app")
	p.Podman(t, "rm", "-f", "app")
	unpacked := filepath.Join(p.Dir, "unpacked")
	os.MkdirAll(unpacked, 0o755)
	harness.Run(t, time.Minute, nil, "tar", "--zstd", "-C", unpacked, "-xf", export)
	pages, _ := filepath.Glob(filepath.Join(unpacked, "checkpoint", "pages-*.img"))
	if len(pages) == 0 {
		t.Fatal("no pages image in the export")
	}
	harness.FlipByte(t, pages[0])
	corrupt := filepath.Join(p.Dir, "corrupt.tar.zst")
	harness.Run(t, time.Minute, nil, "tar", "--zstd", "-C", unpacked, "-cf", corrupt, ".")
	out, err := p.PodmanErr("container", "restore", "--import", corrupt)
	if err == nil {
		t.Fatalf("restore of a corrupt checkpoint succeeded:\n%s", out)
	}
	if !strings.Contains(out, filepath.Base(pages[0])) || !strings.Contains(out, "corrupt") {
		t.Errorf("error does not name the corrupt file:\n%s", out)
	}
	if st := p.State(t, "app"); st == "running" {
		t.Fatalf("container runs after a refused restore")
	}
}

// With CRYO_CRIU_HOOKS=1, cryo-runc gives each container a CRIU action
// script, so that a direct `runc checkpoint --leave-running`, bypassing
// cryo-runc, still suspends CUDA before the dump, writes the manifest, and
// resumes CUDA afterwards.
func TestPodmanHooksDirectRuncCheckpoint(t *testing.T) {
	p := harness.NewPodman(t, "CRYO_CRIU_HOOKS=1")
	p.RunApp(t, "app")
	id := strings.TrimSpace(p.Podman(t, "inspect", "--format", "{{.Id}}", "app"))
	img := filepath.Join(p.Dir, "direct")
	// Podman gives runc no --root, so runc's default state directory holds it.
	out := harness.Run(t, time.Minute, nil, "/usr/sbin/runc", "checkpoint", "--leave-running", "--image-path", img, "--work-path", filepath.Join(p.Dir, "direct-work"), id)
	m, err := manifest.Read(img)
	if err != nil {
		t.Fatalf("direct runc checkpoint wrote no manifest: %v\n%s", err, out)
	}
	if len(m.Processes) != 1 || m.Processes[0].State != "running" || m.Digests == nil {
		t.Fatalf("manifest of the direct checkpoint: %+v", m)
	}
	if err := digest.Verify(img, m.Digests); err != nil {
		t.Fatalf("digests of the direct checkpoint: %v", err)
	}
	// The resume happens in a watcher once CRIU has exited.
	// A query may meet the watcher's hold (another tracer): asked again.
	harness.WaitFor(t, 20*time.Second, "CUDA resumed after the direct checkpoint", func() bool {
		st, err := p.CUDAStateErr("app")
		return err == nil && strings.Contains(st, "running") && !strings.Contains(st, "stopped")
	})
	p.RequireContinued(t, "app", harness.PodmanLastTick(p.Ticks(t, "app")))
}

// TestPodmanKilledCryoRunc: cryo-runc SIGKILLed during Podman's checkpoint,
// after CRIU's dump (which ends the container's processes) and before the
// digests. The workload is not lost: `podman container restore` brings it
// back from the dump, which the restore completes, and it carries on with
// its device memory intact.
func TestPodmanKilledCryoRunc(t *testing.T) {
	hold := filepath.Join(t.TempDir(), "hold")
	p := harness.NewPodman(t, "CRYO_TEST_HOLD=digests:"+hold, "CRYO_DIGEST_WATCH=0")
	p.WithRuntime(harness.FailpointBin(t, "cryo-runc")) // the hold is compiled only there
	p.RunApp(t, "app")
	before := harness.PodmanLastTick(p.Ticks(t, "app"))
	ckpt := exec.Command("podman", append(append([]string{}, p.Args...), "container", "checkpoint", "app")...)
	ckpt.Env = append(os.Environ(), p.Env...)
	out := &strings.Builder{}
	ckpt.Stdout, ckpt.Stderr = out, out
	if err := ckpt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ckpt.Process.Kill(); ckpt.Wait() })
	harness.WaitFor(t, 2*time.Minute, "cryo-runc to finish the dump", func() bool {
		_, err := os.Stat(hold)
		return err == nil
	})
	killed := 0
	for _, pid := range harness.PidsOf("cryo-runc", "checkpoint") { // cryo-runc, not podman
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatal("no cryo-runc checkpoint process to kill")
	}
	if err := ckpt.Wait(); err == nil {
		t.Fatalf("podman's checkpoint succeeded although cryo-runc was killed:\n%s", out)
	}
	t.Logf("podman after the kill: %s", strings.TrimSpace(out.String()))
	// The dump ended the container's processes; conmon tells Podman so a
	// moment later, and only then does Podman accept a restore.
	harness.WaitFor(t, 30*time.Second, "Podman to see the dumped container exit", func() bool { return p.State(t, "app") != "running" })
	restored, err := p.PodmanErr("container", "restore", "app")
	if err != nil {
		t.Fatalf("restore after the killed checkpoint: %v\n%s", err, restored)
	}
	if st := p.State(t, "app"); st != "running" {
		t.Fatalf("container is %s after the restore", st)
	}
	p.RequireContinued(t, "app", before)
	if st := p.CUDAState(t, "app"); !strings.Contains(st, "running") {
		t.Fatalf("CUDA after the restore: %s", st)
	}
}
