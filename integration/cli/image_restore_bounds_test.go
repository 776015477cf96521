package cli

import (
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// TestImageRestoreBounds: `cryo image restore` refuses an image whose tar
// holds more entries than CRYO_UNPACK_MAX_ENTRIES, and ends a restore whose
// CRYO_RESTORE_TIMEOUT passes before it is done, each with its reason,
// nothing restored and no work directory left.
func TestImageRestoreBounds(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	base := filepath.Join(t.TempDir(), "restore")
	store := filepath.Join(t.TempDir(), "store")
	app, dir, _ := harness.CheckpointApp(t, env)
	ref := "localhost/ckpt/bounds:v1"
	a := &harness.ImgNode{Store: store, Env: append(append([]string{}, env...), "CRYO_IMAGE_STORE="+store, "CRYO_RESTORE_DIR="+base)}
	a.Cryo(t, "image", "build", dir, ref)

	capped := &harness.ImgNode{Store: store, Env: append(append([]string{}, a.Env...), config.EnvUnpackMaxEntries+"=3")}
	out := capped.CryoFails(t, "image", "restore", ref)
	t.Logf("capped: %s", out)
	harness.WantIn(t, out, "more than 3 entries", config.EnvUnpackMaxEntries+" (now 3)", "nothing was restored; nothing of the unpack is left", "remedy")
	harness.WantEmpty(t, base, "a restore refused for its entries")

	hurried := &harness.ImgNode{Store: store, Env: append(append([]string{}, a.Env...), config.EnvRestoreTimeout+"=1ms")}
	out = hurried.CryoFails(t, "image", "restore", ref)
	t.Logf("hurried: %s", out)
	harness.WantIn(t, out, "the restore did not finish within 1ms ("+config.EnvRestoreTimeout+")", "nothing was restored", "remedy")
	harness.WantEmpty(t, base, "a restore cut off at its deadline")
	if procfs.Alive(app.PID) {
		t.Errorf("pid %d runs: a refused restore restored it", app.PID)
	}
}
