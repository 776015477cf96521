package podman

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// TestRuncwrapDeleteForgetsPause: `runc delete` of a container that a
// GPU-free pause left paused. runc refuses it without --force, and the
// pause record stays, so the resume that follows still brings CUDA back.
// With --force the container goes, and its record with it: a later
// container of the same name must not inherit it.
func TestRuncwrapDeleteForgetsPause(t *testing.T) {
	c := harness.NewMGContainer(t, harness.NewFakeHost(1, "d0d0d0d0"), []int{0})
	c.Start()
	record := filepath.Join(config.DefaultLockDir, "paused-id-"+c.ID+".lock.json")
	exists := func() bool { _, err := os.Stat(record); return err == nil }

	c.CryoRunc(nil, "pause", c.ID)
	if !exists() {
		t.Fatalf("no pause record %s after a GPU-free pause", record)
	}
	out, err := harness.RunErr(time.Minute, c.Host.Env(t), harness.CryoBin(t, "cryo-runc"), "--root", c.Root, "delete", c.ID)
	if err == nil || !exists() {
		t.Fatalf("delete of a paused container without --force: err=%v, record kept %v; want runc's refusal and the record:\n%s", err, exists(), out)
	}
	c.CryoRunc(nil, "resume", c.ID)
	c.WaitTicks(harness.RwLastTick(c.Out.String()) + 2)
	if pg, err := fakecuda.ReadPage(c.PID()); err != nil || pg.State != 0 || pg.Restores != 1 {
		t.Fatalf("CUDA after the refused delete and the resume: %+v (%v), want running after one restore", pg, err)
	}

	c.CryoRunc(nil, "pause", c.ID)
	c.CryoRunc(nil, "delete", "--force", c.ID)
	if exists() {
		t.Fatalf("pause record %s left after runc delete --force", record)
	}
}
