package podman

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// TestPodmanPauseUnpause: `podman pause` through cryo-runc suspends CUDA
// (the fake driver reports the process checkpointed) and then freezes the
// container; `podman unpause` thaws it and brings CUDA back with its device
// memory intact (every tick checks it). Podman refuses to checkpoint a
// paused container, and says so; the container stays paused. The
// annotation cryo.gpu-free-pause=false makes a pause freeze-only.
func TestPodmanPauseUnpause(t *testing.T) {
	p := harness.NewPodman(t)
	p.RunApp(t, "app")
	pid, _ := strconv.Atoi(strings.TrimSpace(p.Podman(t, "inspect", "--format", "{{.State.Pid}}", "app")))
	p.Podman(t, "pause", "app")
	if st := p.State(t, "app"); st != "paused" {
		t.Fatalf("container is %s after podman pause", st)
	}
	if pg, err := fakecuda.ReadPage(pid); err != nil || pg.State != 2 {
		t.Fatalf("CUDA after podman pause: %+v (%v), want checkpointed", pg, err)
	}
	before := harness.PodmanLastTick(p.Ticks(t, "app"))
	time.Sleep(300 * time.Millisecond)
	if now := harness.PodmanLastTick(p.Ticks(t, "app")); now != before {
		t.Fatalf("ticked %d→%d while paused", before, now)
	}

	out, err := p.PodmanErr("container", "checkpoint", "app")
	if err == nil || p.State(t, "app") != "paused" {
		t.Fatalf("checkpoint of a paused container: err=%v, state %s; want Podman's refusal, still paused:\n%s", err, p.State(t, "app"), out)
	}
	t.Logf("Podman on a paused container's checkpoint: %s", strings.TrimSpace(out))

	p.Podman(t, "unpause", "app")
	if st := p.State(t, "app"); st != "running" {
		t.Fatalf("container is %s after podman unpause", st)
	}
	p.RequireContinued(t, "app", before)
	if pg, err := fakecuda.ReadPage(pid); err != nil || pg.State != 0 || pg.Restores != 1 {
		t.Fatalf("CUDA after podman unpause: %+v (%v), want running after one restore", pg, err)
	}

	// The annotation turns it off for its container: freeze only.
	frozen := append(append([]string{"run", "-d", "--name", "frozen", "--annotation", "cryo.gpu-free-pause=false"}, harness.PodmanStandIn...), harness.PodmanImage)
	p.Podman(t, append(frozen, "/bin/fakecuda-app", "100")...)
	p.WaitTicks(t, "frozen", 3)
	fpid, _ := strconv.Atoi(strings.TrimSpace(p.Podman(t, "inspect", "--format", "{{.State.Pid}}", "frozen")))
	p.Podman(t, "pause", "frozen")
	if pg, err := fakecuda.ReadPage(fpid); err != nil || p.State(t, "frozen") != "paused" || pg.State != 0 || pg.Locks != 0 {
		t.Fatalf("freeze-only pause: state %s, CUDA %+v (%v); want paused with CUDA untouched", p.State(t, "frozen"), pg, err)
	}
	p.Podman(t, "unpause", "frozen")
	p.RequireContinued(t, "frozen", harness.PodmanLastTick(p.Ticks(t, "frozen")))

	// Removing a paused container removes its pause record with it: a later
	// container of the same name must not inherit it.
	p.Podman(t, "pause", "app")
	id := strings.TrimSpace(p.Podman(t, "inspect", "--format", "{{.Id}}", "app"))
	record := filepath.Join(config.DefaultLockDir, "paused-id-"+id+".lock.json")
	if _, err := os.Stat(record); err != nil {
		t.Fatalf("pause record of the paused container: %v", err)
	}
	p.Podman(t, "rm", "-f", "app")
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Fatalf("pause record after podman rm -f: %v, want it gone", err)
	}
}
