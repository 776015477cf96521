package criu

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// criuThreadsDumps is how many checkpoints TestCRIUThreadsReleased takes in
// a row. The race it guards against is rare per dump (patch 0008), so the
// test is a net for a thread never released, not a proof of the race.
const criuThreadsDumps = 15

// TestCRIUThreadsReleased: a container of cryo-runc whose /dev and
// /dev/shm are tmpfs mounts, with data in /dev/shm, is checkpointed with
// --leave-running criuThreadsDumps times in a row by cryo's CRIU while
// every CPU is kept busy. Every dump must succeed: the threads that
// cryo's patches start in CRIU (the zero page readers, the tmpfs filter
// and gzip) must be released before CRIU enters the next mount namespace,
// or setns fails with "Can't setns N/mnt: Invalid argument" (patch 0008).
func TestCRIUThreadsReleased(t *testing.T) {
	harness.RequireRoot(t)
	criu := harness.PatchedCRIU(t)
	dir := t.TempDir()
	env := filepath.Join(dir, "cryo.env")
	lines := append([]string{"CRYO_RUNC=/usr/sbin/runc", "CRYO_CRIU=" + criu}, harness.FakeDriverEnv(t, "")...)
	if err := os.WriteFile(env, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	criuEnv := []string{"CRYO_CRIU=" + criu}
	bundle := zeroTmpfsBundle(t, filepath.Join(dir, "bundle"))
	root := filepath.Join(dir, "runc-root")
	id := "cryo-threads-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id) })
	wrap := harness.CryoBin(t, "cryo-runc")
	out := harness.RwRunDetached(t, criuEnv, wrap, "--cryo-env", env, "--root", root, "run", "-d", "--bundle", bundle, id)
	harness.WaitFor(t, 20*time.Second, "the app to tick", func() bool { return harness.RwLastTick(out.String()) >= 3 })
	// 8 MiB in /dev/shm, half of its pages zero, so that the filter has work.
	data := make([]byte, 8<<20)
	for p := 0; p < len(data); p += 8192 {
		data[p] = byte(p>>13) | 1
	}
	shm := filepath.Join("/proc", strconv.Itoa(harness.RwInitPID(t, root, id)), "root/dev/shm/data")
	if err := os.WriteFile(shm, data, 0o640); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < runtime.NumCPU(); i++ {
		wg.Add(1)
		go func() { // load, so that an exiting thread of CRIU waits for a CPU
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	failed := 0
	for i := 0; i < criuThreadsDumps; i++ {
		img := filepath.Join(dir, "img"+strconv.Itoa(i))
		o, err := harness.RunErr(2*time.Minute, criuEnv, wrap, "--cryo-env", env, "--root", root, "checkpoint",
			"--leave-running", "--image-path", img, "--work-path", img+".work", id)
		if err != nil {
			failed++
			log, _ := os.ReadFile(filepath.Join(img+".work", "dump.log"))
			t.Errorf("dump %d of %d: %v\n%s\n%s", i+1, criuThreadsDumps, err, o, harness.Tail(string(log), 15))
			if failed >= 3 {
				t.FailNow()
			}
		}
		os.RemoveAll(img)
		os.RemoveAll(img + ".work")
	}
	last := harness.RwLastTick(out.String())
	harness.WaitFor(t, 20*time.Second, "the app to tick on after the dumps", func() bool { return harness.RwLastTick(out.String()) > last })
}
