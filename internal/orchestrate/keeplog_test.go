package orchestrate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/report"
)

// A failed image restore's work directory is removed; its CRIU log is kept
// and the message keeps quoting the log's cause, not the rlimit line CRIU
// logs first on every run.
func TestKeepCRIULogs(t *testing.T) {
	work, keep := t.TempDir(), filepath.Join(t.TempDir(), "logs")
	log := filepath.Join(work, "checkpoint", RestoreLog)
	if err := os.MkdirAll(filepath.Dir(log), 0o700); err != nil {
		t.Fatal(err)
	}
	text := "(00.001) Error (criu/rlimit.c:42): rlimit: Can't setup RLIMIT_NOFILE for self\n" +
		"(00.020) Error (criu/files-reg.c:2133): File app.log has bad size 31635 (expect 1018)\n"
	if err := os.WriteFile(log, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	err := fmt.Errorf("restore: %w", &report.StepError{Op: "restore", Step: "criu restore", LogPath: log,
		Err: &CRIUError{Op: "restore", LogPath: log, Err: errors.New("criu failed")}})
	kept, err := KeepCRIULogs(err, work, keep)
	if len(kept) != 1 {
		t.Fatalf("kept %v, want the one log", kept)
	}
	if err := os.RemoveAll(work); err != nil {
		t.Fatal(err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "has bad size 31635") || strings.Contains(msg, "RLIMIT") || !strings.Contains(msg, kept[0]) || strings.Contains(msg, work) {
		t.Fatalf("after the work directory went, the message is %q", msg)
	}
	if fi, err := os.Stat(kept[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kept log %s: %v %v", kept[0], err, fi)
	}
	var se *report.StepError
	if !errors.As(err, &se) || se.LogPath != kept[0] {
		t.Fatalf("the step error does not name the kept log: %+v", se)
	}
	if none, _ := KeepCRIULogs(errors.New("no log"), work, keep); none != nil {
		t.Fatal("kept a log for an error that names none")
	}
}
