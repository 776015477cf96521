package containerd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// concurrentShimRounds is smaller than concurrentRounds: each round is two
// `ctr task checkpoint`, which names its image by the second.
const concurrentShimRounds = 5

// testConcurrentTaskCheckpoints: two `ctr task checkpoint` of one task at
// once. containerd pauses the task before each request; the shim refuses
// the second Pause while the first checkpoint runs, so the first one's
// driver calls never meet a frozen cgroup, and the second request fails at
// once naming the first.
func testConcurrentTaskCheckpoints(d *harness.Daemon) {
	d.RunApp("cc")
	pid := d.Task("cc").Pid()
	harness.SlowLock(d.T, d.Faults, int(pid))
	ctr := filepath.Join(d.Bin, "ctr")
	args := []string{"--address", d.Socket, "--namespace", harness.TestNamespace, "task", "checkpoint", "cc"}
	var ref string
	var refBefore int // the last tick before the winning checkpoint of ref
	for r := 0; r < concurrentShimRounds; r++ {
		time.Sleep(1100 * time.Millisecond) // a fresh image name
		before := harness.CtrdLastTick(d.T, d.LogPath("cc"))
		res := harness.Race(d.Env(), append([]string{ctr}, args...), append([]string{ctr}, args...))
		win := harness.OneWins(d.T, r, res, "container cc")
		lines := strings.Fields(strings.TrimSpace(res[win].Out))
		ref, refBefore = lines[len(lines)-1], before
		d.AssertRunsOn("cc")
		if harness.CtrdLastTick(d.T, d.LogPath("cc")) <= before {
			d.T.Fatalf("round %d: the app did not tick on", r)
		}
	}
	os.Remove(filepath.Join(d.Faults, "lock."+strconv.Itoa(int(pid))))
	d.RestoreTask(ref, "cc-clone")
	d.WaitTicks("cc-clone", 3)
	harness.AssertContinues(d.T, d.LogPath("cc-clone"), refBefore)
	d.Remove("cc-clone")
	d.Remove("cc")
}
