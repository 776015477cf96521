package orchestrate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// sleeper starts a CPU-only child process: Find skips it without calling
// the driver, so these tests need neither a GPU nor the fake driver.
func sleeper(t *testing.T) Target {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	return Target{ID: "test", PIDs: func(context.Context) ([]int, error) { return []int{pid}, nil }}
}

func quiet() *Orchestrator {
	return New(testConfig, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
}

func TestCheckpointWithoutCUDA(t *testing.T) {
	dir := t.TempDir()
	var steps []StepName
	o := New(testConfig, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithEvents(func(e Event) {
		if e.Done {
			steps = append(steps, e.Step)
		}
	}))
	dump := func(context.Context) error {
		return os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("x"), 0o644)
	}
	m, err := o.Checkpoint(context.Background(), sleeper(t), dir, true, dump)
	if err != nil {
		t.Fatal(err)
	}
	if m.HasCUDA() || m.Digests["inventory.img"] == "" {
		t.Fatalf("manifest %+v", m)
	}
	if got := stepNames(steps); got != "find manifest dump digests" {
		t.Fatalf("steps %q", got)
	}
	back, err := quiet().CheckRestore(context.Background(), "test", dir, GPUScope{})
	if err != nil || back.ContainerID != "test" {
		t.Fatalf("CheckRestore: %v %+v", err, back)
	}
}

func TestCheckpointDumpFails(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, DumpLog)
	os.WriteFile(log, []byte("(00.001) Error (criu/util.c:1): rlimit: Can't setup RLIMIT_NOFILE for self\n(00.002) Error (criu/sk-unix.c:9): unix: External socket is used.\n(00.003) Error (criu/cr-dump.c:2): Dumping FAILED.\n"), 0o644)
	dump := func(context.Context) error {
		return &CRIUError{Op: "dump", LogPath: log, Err: errors.New("exit status 1")}
	}
	m, err := quiet().Checkpoint(context.Background(), sleeper(t), dir, false, dump)
	var se *report.StepError
	if !errors.As(err, &se) || se.Step != StepDump || se.LogPath != log {
		t.Fatalf("want a dump report.StepError, got %v", err)
	}
	for _, want := range []string{"checkpoint of test failed at step dump", "External socket is used", "CRIU log: " + log, "left running", "remedy:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if last := m.Steps[len(m.Steps)-1]; last.Name != "dump" || last.Error == "" {
		t.Fatalf("steps %+v", m.Steps)
	}
}

func TestCheckpointNoProcess(t *testing.T) {
	tg := Target{ID: "empty", PIDs: func(context.Context) ([]int, error) { return nil, nil }}
	_, err := quiet().Checkpoint(context.Background(), tg, t.TempDir(), false, nil)
	if !errors.Is(err, cuda.ErrNoProcess) || !strings.Contains(err.Error(), "no process to checkpoint") {
		t.Fatalf("got %v", err)
	}
}

func TestCheckRestoreRefuses(t *testing.T) {
	ctx := context.Background()
	empty := t.TempDir()
	_, err := quiet().CheckRestore(ctx, "x", empty, GPUScope{})
	if !errors.Is(err, manifest.ErrNotCheckpoint) || !strings.Contains(err.Error(), "holds no CRIU images") {
		t.Fatalf("empty dir: %v", err)
	}
	plain := t.TempDir()
	os.WriteFile(filepath.Join(plain, "inventory.img"), nil, 0o644)
	if m, err := quiet().CheckRestore(ctx, "x", plain, GPUScope{}); m != nil || err != nil {
		t.Fatalf("manifest-less CPU checkpoint must pass: %v", err)
	}
	// Into a container (its new spec, or CRIU's action script, whose
	// scope is deferred), a CRIU directory without cryo's manifest is
	// refused: nothing of it could be checked.
	for name, scope := range map[string]GPUScope{"spec": ScopeFromSpec(&specs.Spec{}), "deferred": {Deferred: true}} {
		_, err := quiet().CheckRestore(ctx, "x", plain, scope)
		if !errors.Is(err, manifest.ErrNoManifest) || !strings.Contains(err.Error(), "cryo did not take") {
			t.Fatalf("manifest-less checkpoint into a container (%s scope): %v", name, err)
		}
	}
	os.WriteFile(filepath.Join(plain, "files.img"), []byte("/usr/lib/libcuda.so.1"), 0o644)
	if _, err := quiet().CheckRestore(ctx, "x", plain, GPUScope{}); !errors.Is(err, manifest.ErrNoManifest) {
		t.Fatalf("manifest-less CUDA checkpoint must be refused: %v", err)
	}
}

func TestProcessTreeDeadPID(t *testing.T) {
	cmd := exec.Command("true")
	cmd.Run()
	if _, err := ProcessTree(cmd.Process.Pid); err == nil {
		t.Fatal("dead pid accepted")
	}
	tree, err := ProcessTree(os.Getpid())
	if err != nil || tree[0] != os.Getpid() {
		t.Fatalf("own tree: %v %v", tree, err)
	}
}

func stepNames(s []StepName) string {
	var b []string
	for _, x := range s {
		b = append(b, string(x))
	}
	return strings.Join(b, " ")
}
