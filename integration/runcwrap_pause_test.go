package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// TestRuncwrapDeleteForgetsPause: `runc delete` of a container that a
// GPU-free pause left paused. runc refuses it without --force, and the
// pause record stays, so the resume that follows still brings CUDA back.
// With --force the container goes, and its record with it: a later
// container of the same name must not inherit it.
func TestRuncwrapDeleteForgetsPause(t *testing.T) {
	c := newMGContainer(t, newFakeHost(1, "d0d0d0d0"), []int{0})
	c.start()
	record := filepath.Join(config.DefaultLockDir, "paused-id-"+c.id+".lock.json")
	exists := func() bool { _, err := os.Stat(record); return err == nil }

	c.cryoRunc(nil, "pause", c.id)
	if !exists() {
		t.Fatalf("no pause record %s after a GPU-free pause", record)
	}
	out, err := runErr(time.Minute, c.host.env(t), cryoBin(t, "cryo-runc"), "--root", c.root, "delete", c.id)
	if err == nil || !exists() {
		t.Fatalf("delete of a paused container without --force: err=%v, record kept %v; want runc's refusal and the record:\n%s", err, exists(), out)
	}
	c.cryoRunc(nil, "resume", c.id)
	c.waitTicks(rwLastTick(c.out.String()) + 2)
	if pg, err := fakecuda.ReadPage(c.pid()); err != nil || pg.State != 0 || pg.Restores != 1 {
		t.Fatalf("CUDA after the refused delete and the resume: %+v (%v), want running after one restore", pg, err)
	}

	c.cryoRunc(nil, "pause", c.id)
	c.cryoRunc(nil, "delete", "--force", c.id)
	if exists() {
		t.Fatalf("pause record %s left after runc delete --force", record)
	}
}
