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
)

func TestEstablishedTCP(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"tcp-stream-1a2b.img", "tcp-stream-3c.img", "inetsk.img", "tcp-stream-x.log"} {
		os.WriteFile(filepath.Join(dir, f), nil, 0o600)
	}
	if n, err := EstablishedTCP(dir); n != 2 || err != nil {
		t.Fatalf("EstablishedTCP: %d, %v; want 2", n, err)
	}
	if _, err := EstablishedTCP(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing directory counted")
	}
}

// A dump that CRIU refused for an established connection gets the front
// end's way to ask for it as its remedy, not CRIU's own flag alone.
func TestCheckpointTCPRemedy(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, DumpLog)
	os.WriteFile(log, []byte("(00.002) Error (criu/sk-inet.c:199): inet: Connected TCP socket, consider using --tcp-established option.\n(00.003) Error (criu/cr-dump.c:2): Dumping FAILED.\n"), 0o644)
	dump := func(context.Context) error {
		return RuncCRIUError("dump", errors.New("criu failed: type NOTIFY errno 0 path= "+log))
	}
	o := New(testConfig, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	_, err := o.Checkpoint(context.Background(), sleeper(t), dir, false, dump)
	for _, want := range []string{"Connected TCP socket", "remedy: for the established TCP connection, checkpoint with `cryo checkpoint --tcp-established`", "left running"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
}
