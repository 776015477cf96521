package criuaction

import (
	"context"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// startChild runs argv as a real child, reaped in the background; done
// closes when it has exited.
func startChild(t *testing.T, argv ...string) (pid int, done <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() { _ = cmd.Wait(); close(ch) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-ch })
	return cmd.Process.Pid, ch
}

// The watcher's pid list (CRYO_WATCH_PIDS) keeps the processes that still
// live, and nothing that is no pid.
func TestLivePIDs(t *testing.T) {
	live, _ := startChild(t, "sleep", "30")
	gone, done := startChild(t, "true")
	<-done
	list := strings.Join([]string{strconv.Itoa(live), "", "x", strconv.Itoa(gone), "-1"}, ",")
	if got := livePIDs(list); !reflect.DeepEqual(got, []int{live}) {
		t.Errorf("livePIDs(%q) = %v, want [%d]", list, got, live)
	}
	if got := livePIDs(""); got != nil {
		t.Errorf("livePIDs(\"\") = %v", got)
	}
}

// The watcher waits for its CRIU (a real process here) to end; when the
// dump ended the container too, there is nothing to resume. A pid whose
// start time is not CRIU's is another process: CRIU is gone. A CRIU that
// outlives the bound leaves CUDA suspended, and says how to resume it.
func TestWatchWaitsForCRIU(t *testing.T) {
	useMarkers(t)
	t.Setenv("CRTOOLS_IMAGE_DIR", "")
	t.Setenv("CRYO_WATCH_DIR", t.TempDir())
	gone, done := startChild(t, "true")
	<-done
	criu, criuDone := startChild(t, "sleep", "0.3")
	t.Setenv("CRYO_WATCH_CRIU_PID", strconv.Itoa(criu))
	t.Setenv("CRYO_WATCH_CRIU_START", procfs.StartTime(criu))
	t.Setenv("CRYO_WATCH_PIDS", strconv.Itoa(gone))
	began := time.Now()
	if err := watch(context.Background(), nil); err != nil {
		t.Fatalf("watch after CRIU ended with the container: %v", err)
	}
	if took := time.Since(began); took < 250*time.Millisecond {
		t.Fatalf("watch returned after %s, before CRIU (pid %d, 0.3 s) ended", took, criu)
	}
	<-criuDone

	other, _ := startChild(t, "sleep", "30")
	t.Setenv("CRYO_WATCH_CRIU_PID", strconv.Itoa(other))
	t.Setenv("CRYO_WATCH_CRIU_START", "1") // not its start time: pid reused
	if err := watch(context.Background(), nil); err != nil {
		t.Fatalf("watch with a reused pid: %v", err)
	}

	old := criuExitTimeout
	criuExitTimeout = 200 * time.Millisecond
	t.Cleanup(func() { criuExitTimeout = old })
	t.Setenv("CRYO_WATCH_CRIU_START", procfs.StartTime(other))
	err := watch(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "still runs") || !strings.Contains(err.Error(), "cryo cuda resume") {
		t.Fatalf("watch of a CRIU that does not end: %v", err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(other)); err != nil {
		t.Fatalf("the watcher touched the process it waited for: %v", err)
	}
}
