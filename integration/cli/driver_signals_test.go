package cli

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// fakeDriverRig is the table's rig on the fake driver: fakecuda-app with
// a 384 MiB buffer (so that CRIU's dump takes a moment), the driver's
// actions paused halfway by its fault file.
func fakeDriverRig(t *testing.T) harness.DriverRig {
	faults := t.TempDir()
	env := append(harness.FakeDriverEnv(t, faults), "CRYO_DIGEST_WATCH=0", "FAKECUDA_BUFFER_KIB=393216")
	procs := map[int]*harness.BareProc{}
	return harness.DriverRig{
		Env: env,
		Start: func(t *testing.T) int {
			p := harness.BareStartFakeApp(t, env, nil)
			procs[p.PID] = p
			return p.PID
		},
		Arm: func(t *testing.T, mid string) {
			if mid == "checkpoint" || mid == "restore" {
				harness.WriteFile(t, filepath.Join(faults, mid), "midway 1500 once\n")
			}
		},
		Await: func(t *testing.T, mid string, pid int, img string) {
			if mid == "dump" {
				harness.WaitFor(t, harness.BareTimeout, "CRIU to write pages", func() bool { return harness.DumpedBytes(img) > 16<<20 })
				return
			}
			// "once" removes the file as the driver's call begins.
			harness.WaitFor(t, time.Minute, "the driver's "+mid+" to begin", func() bool {
				_, err := os.Stat(filepath.Join(faults, mid))
				return os.IsNotExist(err)
			})
			time.Sleep(300 * time.Millisecond)
		},
		Intact: func(t *testing.T, pid int, out string) { runsIntact(t, env, procs[pid], out) },
	}
}

// TestDriverSignalSweep: the driver table (DriverCases) on the fake
// driver. About 40 s here.
func TestDriverSignalSweep(t *testing.T) {
	harness.RequireRoot(t)
	rig := fakeDriverRig(t)
	for _, c := range harness.DriverCases {
		t.Run(c.Name, func(t *testing.T) { harness.RunDriverCase(t, rig, c) })
	}
}
