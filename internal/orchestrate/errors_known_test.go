package orchestrate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A CRIU failure the log does not explain gets its remedy in the message.
func TestCRIUErrorKnownCause(t *testing.T) {
	log := filepath.Join(t.TempDir(), "dump.log")
	line := "(00.118198) Error (criu/sockets.c:628): sockets: Can't get 1:16 opt: Operation not supported\n"
	if err := os.WriteFile(log, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	msg := (&CRIUError{Op: "dump", LogPath: log, Err: errors.New("exit status 1")}).Error()
	for _, want := range []string{"Can't get 1:16 opt", "CRIU older than 4.2", "unix sockets"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	wrapped := RuncCRIUError("dump", errors.New("criu failed: type NOTIFY errno 0\nlog file: "+log))
	if !strings.Contains(wrapped.Error(), "CRIU older than 4.2") || CRIULogPath(wrapped) != log {
		t.Errorf("runc error not turned into the CRIU cause: %v", wrapped)
	}
}
