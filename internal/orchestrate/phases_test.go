package orchestrate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// breakAt arranges for the checkpoint of app into dir to fail at step, and
// returns the dump to use.
func breakAt(t *testing.T, o *Orchestrator, step StepName, app *fakeApp, dir string) DumpFunc {
	t.Helper()
	dump := func(context.Context) error {
		return os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("x"), 0o600)
	}
	switch step {
	case StepSuspend:
		fault(t, "lock", app.PID, "error 2")
	case StepManifest:
		// A non-empty directory where the manifest goes: the rename fails.
		os.MkdirAll(filepath.Join(dir, manifest.ManifestName, "x"), 0o700)
	case StepDump:
		dump = func(context.Context) error { return errors.New("CRIU exited with status 1") }
	case StepDigests:
		// As an I/O error of the disk would: the hashing fails.
		o.hashFiles = func(string, digest.Progress) (map[string]string, error) {
			return nil, errors.New("read pages-1.img: input/output error")
		}
	}
	return dump
}

// TestCheckpointFailureTable: a checkpoint that fails at each step, with
// and without leave-running, returns a StepError naming the step, and
// leaves the processes as its outcome says: before the dump has succeeded,
// always running with CUDA resumed and their device memory intact; after
// it, running if they were to keep running, otherwise left to the dump
// (which ends them) and said so.
func TestCheckpointFailureTable(t *testing.T) {
	opt := fakeDriver(t)
	for _, step := range []StepName{StepSuspend, StepManifest, StepDump, StepDigests} {
		for _, leave := range []bool{false, true} {
			t.Run(string(step)+map[bool]string{false: "", true: "/leave-running"}[leave], func(t *testing.T) {
				app := startFakeApp(t)
				dir := t.TempDir()
				o := New(opt, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
				o.Config.HashAfterDump = step == StepDigests // the failing hash runs after the dump
				target := Target{ID: "table", PIDs: func(context.Context) ([]int, error) { return []int{app.PID}, nil }}
				m, err := o.Checkpoint(context.Background(), target, dir, leave, breakAt(t, o, step, app, dir))
				var se *report.StepError
				if !errors.As(err, &se) || se.Step != string(step) {
					t.Fatalf("want a report.StepError at %s, got %v", step, err)
				}
				if last := m.Steps[len(m.Steps)-1]; last.Name != string(step) && last.Name != string(StepRollback) {
					t.Fatalf("manifest steps end with %+v, want %s (or its rollback)", last, step)
				}
				st, serr := o.driver().State(context.Background(), app.PID)
				dumpedAway := step == StepDigests && !leave
				switch {
				case dumpedAway:
					if !strings.Contains(se.Outcome, "dumped and have exited") {
						t.Fatalf("outcome %q, want it to say the dump ended the processes", se.Outcome)
					}
				case serr != nil || st != cuda.StateRunning:
					t.Fatalf("CUDA state %v (%v) after a failure at %s, want running; outcome %q", st, serr, step, se.Outcome)
				default:
					app.WaitTicks(t, 3)
				}
			})
		}
	}
}

// TestBeginCheckpoint: the first phase alone (the CRIU action script's
// pre-dump) leaves CUDA suspended and a manifest without digests for a
// dump outside cryo; failing at its last step it resumes CUDA, so a dump
// that then never comes cannot strand the processes suspended.
func TestBeginCheckpoint(t *testing.T) {
	opt := fakeDriver(t)
	o := New(opt, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	app := startFakeApp(t)
	target := Target{ID: "hooks", PIDs: func(context.Context) ([]int, error) { return []int{app.PID}, nil }}
	dir := t.TempDir()
	m, err := o.BeginCheckpoint(context.Background(), target, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := o.driver().State(context.Background(), app.PID); st != cuda.StateCheckpointed {
		t.Fatalf("after the first phase CUDA is %v, want checkpointed for the dump", st)
	}
	if back, err := manifest.Read(dir); err != nil || !back.Unfinished() || !m.HasCUDA() {
		t.Fatalf("manifest after the first phase: %+v, %v; want one without digests listing the CUDA process", back, err)
	}
	if err := o.driver().Resume(context.Background(), []int{app.PID}, cuda.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	app.WaitTicks(t, 3)

	broken := t.TempDir()
	os.MkdirAll(filepath.Join(broken, manifest.ManifestName, "x"), 0o700)
	_, err = o.BeginCheckpoint(context.Background(), target, broken)
	var se *report.StepError
	if !errors.As(err, &se) || se.Step != StepManifest {
		t.Fatalf("want a report.StepError at manifest, got %v", err)
	}
	if st, _ := o.driver().State(context.Background(), app.PID); st != cuda.StateRunning {
		t.Fatalf("after a failed first phase CUDA is %v, want running", st)
	}
	app.WaitTicks(t, 3)
}

// TestEndCheckpoint: the second phase after a dump outside cryo (CRIU's
// post-dump action) records the dump's duration, takes the digests and
// finishes the manifest, touching no process; failing at its digests it
// leaves the checkpoint unfinished and says how to finish it.
func TestEndCheckpoint(t *testing.T) {
	o := New(fakeDriver(t), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	app := startFakeApp(t)
	target := Target{ID: "hooks-end", PIDs: func(context.Context) ([]int, error) { return []int{app.PID}, nil }}
	for _, fails := range []bool{false, true} {
		dir := t.TempDir()
		if _, err := o.BeginCheckpoint(context.Background(), target, dir); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("pages"), 0o600) // CRIU's dump
		o.Config.HashAfterDump = true
		o.hashFiles = nil
		if fails {
			o.hashFiles = func(string, digest.Progress) (map[string]string, error) {
				return nil, errors.New("read pages-1.img: input/output error")
			}
		}
		m, err := o.EndCheckpoint(context.Background(), target, dir)
		o.hashFiles = nil
		if err := o.ResumeCUDA(context.Background(), []int{app.PID}); err != nil {
			t.Fatal(err)
		}
		app.WaitTicks(t, 2)
		back, rerr := manifest.Read(dir)
		var se *report.StepError
		switch {
		case fails && (!errors.As(err, &se) || se.Step != StepDigests || !strings.Contains(se.Remedy, "--finish")):
			t.Fatalf("failing digests: %v, want a report.StepError at digests naming --finish", err)
		case fails && (rerr != nil || !back.Unfinished()):
			t.Fatalf("after failing digests the manifest is %+v (%v), want it unfinished", back, rerr)
		case !fails && (err != nil || rerr != nil || back.Unfinished() || back.Digests["pages-1.img"] == ""):
			t.Fatalf("second phase: %v; manifest %+v (%v), want finished with the dump's digests", err, back, rerr)
		case !fails && m.Steps[len(m.Steps)-2].Name != string(StepDump):
			t.Fatalf("steps %+v: want the dump recorded before the digests", m.Steps)
		}
	}
}
