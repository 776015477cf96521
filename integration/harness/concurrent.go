package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// raceResult is one command of a pair.
type raceResult struct {
	Out  string
	Err  error
	took time.Duration
}

// Race runs two commands at once and returns both results.
func Race(env []string, a, b []string) [2]raceResult {
	var res [2]raceResult
	var wg sync.WaitGroup
	for i, args := range [][]string{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			out, err := RunErr(BareTimeout, env, args[0], args[1:]...)
			res[i] = raceResult{Out: out, Err: err, took: time.Since(start)}
		}()
	}
	wg.Wait()
	return res
}

// OneWins checks that exactly one of a pair succeeded and that the other
// failed fast naming the lock holder; it returns the winner's index.
func OneWins(t testing.TB, round int, res [2]raceResult, holder string) int {
	t.Helper()
	if (res[0].Err == nil) == (res[1].Err == nil) {
		t.Fatalf("round %d: want exactly one success:\nA (%v): %s\nB (%v): %s", round, res[0].Err, res[0].Out, res[1].Err, res[1].Out)
	}
	win := 0
	if res[0].Err != nil {
		win = 1
	}
	lose := res[1-win]
	// Through containerd, a second request whose Pause comes while the
	// first request's own Pause holds the task, before the shim has begun
	// the first checkpoint, is refused by containerd itself: as fast, and
	// before anything is touched. One whose Pause comes while the first
	// one's GPU-free pause runs is refused by that pause's lock.
	switch {
	case strings.Contains(lose.Out, "cannot pause a paused container"):
	case strings.Contains(lose.Out, "a pause of "+holder):
		WantIn(t, lose.Out, "a pause of "+holder+" is in progress (pid ", " of cryo)")
	case strings.Contains(lose.Out, "a resume of "+holder):
		// The winner's checkpoint is done and containerd's resume of the
		// task (which gives the GPU back) holds the lock.
		WantIn(t, lose.Out, "a resume of "+holder+" is in progress (pid ", " of cryo)")
	default:
		WantIn(t, lose.Out, "a checkpoint of "+holder+" is in progress (pid ", " of cryo)")
	}
	if lose.took > res[win].took {
		t.Fatalf("round %d: the refused run took %s, longer than the one that ran (%s): it waited instead of failing fast", round, lose.took, res[win].took)
	}
	return win
}

// SlowLock arms the fake driver's lock of pid with a delay.
func SlowLock(t testing.TB, faults string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(faults, "lock."+strconv.Itoa(pid)), []byte("delay 300"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func RwInitPID(t *testing.T, root, id string) int {
	t.Helper()
	st := Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", root, "state", id)
	i := strings.Index(st, `"pid":`)
	if i < 0 {
		t.Fatalf("runc state: %s", st)
	}
	n, _ := strconv.Atoi(strings.Trim(strings.Fields(st[i+6:])[0], ", "))
	return n
}
