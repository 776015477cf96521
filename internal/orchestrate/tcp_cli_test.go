package orchestrate_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/words"
)

// A dump that CRIU refused for an established connection gets the front
// end's way to ask for it as its remedy, not CRIU's own flag alone: the
// CLI's, which it passes as its front end.
func TestCheckpointTCPRemedy(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, orchestrate.DumpLog)
	os.WriteFile(log, []byte("(00.002) Error (criu/sk-inet.c:199): inet: Connected TCP socket, consider using --tcp-established option.\n(00.003) Error (criu/cr-dump.c:2): Dumping FAILED.\n"), 0o644)
	dump := func(context.Context) error {
		return orchestrate.RuncCRIUError("dump", errors.New("criu failed: type NOTIFY errno 0 path= "+log))
	}
	o := orchestrate.New(orchestrate.TestConfig, orchestrate.WithFrontEnd(words.Remedies), orchestrate.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	_, err := o.Checkpoint(context.Background(), orchestrate.Sleeper(t), dir, false, dump)
	for _, want := range []string{"Connected TCP socket", "remedy: for the established TCP connection, checkpoint with `cryo checkpoint --tcp-established`", "left running"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
}
