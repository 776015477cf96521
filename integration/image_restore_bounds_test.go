package integration

import (
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// TestImageRestoreBounds: `cryo image restore` refuses an image whose tar
// holds more entries than CRYO_UNPACK_MAX_ENTRIES, and ends a restore whose
// CRYO_RESTORE_TIMEOUT passes before it is done, each with its reason,
// nothing restored and no work directory left.
func TestImageRestoreBounds(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	base := filepath.Join(t.TempDir(), "restore")
	store := filepath.Join(t.TempDir(), "store")
	app, dir, _ := checkpointApp(t, env)
	ref := "localhost/ckpt/bounds:v1"
	a := &imgNode{store: store, env: append(append([]string{}, env...), "CRYO_IMAGE_STORE="+store, "CRYO_RESTORE_DIR="+base)}
	a.cryo(t, "image", "build", dir, ref)

	capped := &imgNode{store: store, env: append(append([]string{}, a.env...), config.EnvUnpackMaxEntries+"=3")}
	out := capped.cryoFails(t, "image", "restore", ref)
	t.Logf("capped: %s", out)
	wantIn(t, out, "more than 3 entries", config.EnvUnpackMaxEntries+" (now 3)", "nothing was restored; nothing of the unpack is left", "remedy")
	wantEmpty(t, base, "a restore refused for its entries")

	hurried := &imgNode{store: store, env: append(append([]string{}, a.env...), config.EnvRestoreTimeout+"=1ms")}
	out = hurried.cryoFails(t, "image", "restore", ref)
	t.Logf("hurried: %s", out)
	wantIn(t, out, "the restore did not finish within 1ms ("+config.EnvRestoreTimeout+")", "nothing was restored", "remedy")
	wantEmpty(t, base, "a restore cut off at its deadline")
	if procfs.Alive(app.pid) {
		t.Errorf("pid %d runs: a refused restore restored it", app.pid)
	}
}
