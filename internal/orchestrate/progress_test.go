package orchestrate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// growingDump writes pages-1.img in pieces over a few hundred
// milliseconds, as CRIU writes its pages, then inventory.img; or fails
// with err halfway; errInterrupt there cancels the checkpoint's context
// instead, as a user's ^C would.
func growingDump(dir string, err error, cancel func()) DumpFunc {
	return func(ctx context.Context) error {
		f, ferr := os.OpenFile(filepath.Join(dir, "pages-1.img"), os.O_CREATE|os.O_WRONLY, 0o600)
		if ferr != nil {
			return ferr
		}
		defer f.Close()
		piece := bytes.Repeat([]byte{7}, 1<<20)
		for i := 0; i < 8; i++ {
			if i == 4 && err == errInterrupt {
				cancel()
			} else if i == 4 && err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			f.Write(piece)
			time.Sleep(50 * time.Millisecond)
		}
		return os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("x"), 0o600)
	}
}

var errInterrupt = errors.New("interrupt")

func progressCheckpoint(t *testing.T, terminal bool, dumpErr error) (string, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opt := fakeDriver(t)
	app := startFakeApp(t)
	dir := t.TempDir()
	var out testsupport.Buffer
	o := New(opt, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithProgress(progress.New(&out, terminal)))
	target := Target{ID: "app", PIDs: func(context.Context) ([]int, error) { return []int{app.PID}, nil }}
	_, err := o.Checkpoint(ctx, target, dir, true, growingDump(dir, dumpErr, cancel))
	return out.String(), err
}

// TestCheckpointProgressPlain: off a terminal, each long step of a CUDA
// checkpoint has a start line and an end line that says done, with the
// bytes the dump wrote and hashed.
func TestCheckpointProgressPlain(t *testing.T) {
	out, err := progressCheckpoint(t, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "\r") {
		t.Fatalf("plain output has carriage returns:\n%s", out)
	}
	for _, want := range []string{
		"app: suspending CUDA… 64.0 KiB\n", "app: suspending CUDA done in ",
		"app: dumping with CRIU… ~", "app: dumping with CRIU done in ",
		"app: resuming CUDA done",
		" (64.0 KiB, ", " (8.0 MiB, ",
		"app: hashing image files done",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Fatalf("output:\n%s", out)
	}
	t.Logf("output:\n%s", out)
}

// TestCheckpointProgressFailedDump: a dump that fails ends its line
// "failed" and the rollback's line follows; nothing says the dump is done.
func TestCheckpointProgressFailedDump(t *testing.T) {
	out, err := progressCheckpoint(t, false, errors.New("CRIU exited with status 1"))
	if err == nil {
		t.Fatal("the dump's failure was lost")
	}
	if !strings.Contains(out, "app: dumping with CRIU failed after ") || strings.Contains(out, "dumping with CRIU done") ||
		!strings.Contains(out, "app: rolling back: resuming CUDA done") {
		t.Fatalf("output:\n%s", out)
	}
}

// TestCheckpointProgressInterrupted: on a terminal, a checkpoint whose
// context is canceled during the dump ends the dump's line "interrupted";
// every line is drawn in place and finished once.
func TestCheckpointProgressInterrupted(t *testing.T) {
	out, err := progressCheckpoint(t, true, errInterrupt)
	if err == nil {
		t.Fatal("a canceled checkpoint succeeded")
	}
	if !strings.Contains(out, "\r\x1b[Kapp: dumping with CRIU interrupted after ") {
		t.Fatalf("no interrupted line:\n%q", out)
	}
	if strings.Contains(out, "dumping with CRIU done") {
		t.Fatalf("an interrupted dump said done:\n%q", out)
	}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if !strings.Contains(l, " done in ") && !strings.Contains(l, " failed after ") && !strings.Contains(l, " interrupted after ") {
			t.Fatalf("a line that is neither done, failed nor interrupted: %q", l)
		}
	}
}

func TestRecordedCopyRate(t *testing.T) {
	m := &manifest.Manifest{Processes: []manifest.Process{{PID: 1, GPUMemory: 4 << 30}, {PID: 2, GPUMemory: 4 << 30}}}
	if r := recordedCopyRate(m); r != 0 {
		t.Fatalf("a rate without a suspend: %v", r)
	}
	m.AddStep(string(StepSuspend), 2*time.Second, nil)
	if r := recordedCopyRate(m); r != 4<<30 {
		t.Fatalf("rate %v, want 4 GiB/s", r)
	}
	m.Steps[0].Error = "x"
	if r := recordedCopyRate(m); r != 0 {
		t.Fatalf("a failed suspend measured nothing: %v", r)
	}
}

// TestCUDASuspendResumeLines: the functions behind `cryo cuda
// suspend/resume` draw one line each and finish it.
func TestCUDASuspendResumeLines(t *testing.T) {
	o := New(fakeDriver(t))
	app := startFakeApp(t)
	var out testsupport.Buffer
	r := progress.New(&out, false)
	ctx := context.Background()
	if err := CUDASuspend(ctx, o.driver(), []int{app.PID}, cuda.SetOptions{}, r); err != nil {
		t.Fatal(err)
	}
	if err := CUDAResume(ctx, o.driver(), []int{app.PID}, cuda.SetOptions{}, r); err != nil {
		t.Fatal(err)
	}
	fault(t, "lock", app.PID, "error 2")
	if err := CUDASuspend(ctx, o.driver(), []int{app.PID}, cuda.SetOptions{}, r); err == nil {
		t.Fatal("a suspend whose lock fails succeeded")
	}
	s := out.String()
	pid := pidsLabel([]int{app.PID})
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if !strings.Contains(s, pid+": suspending CUDA done") || !strings.Contains(s, pid+": resuming CUDA done") ||
		!strings.HasPrefix(lines[len(lines)-1], pid+": suspending CUDA failed after ") {
		t.Fatalf("output:\n%s", s)
	}
	t.Logf("output:\n%s", s)
}
