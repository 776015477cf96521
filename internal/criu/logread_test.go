package criu

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/report"
)

// LogCause skips CRIU's harmless rlimit lines.
func TestLogCauseSkipsRlimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), DumpLog)
	log := "(00.000010) Error (criu/util.c:1711): Can't setup RLIMIT_NOFILE for self: Operation not permitted\n" +
		"(00.000020) Error (criu/cr-service.c:99): prlimit failed: Operation not permitted\n" +
		"(00.101000) Error (criu/x.c:1): files: Can't open file x\n" +
		"(00.102000) Error (criu/cr-dump.c:2): Dumping FAILED.\n"
	if err := os.WriteFile(p, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := LogCause(p); got != "files: Can't open file x" {
		t.Errorf("first real error line: %q", got)
	}
}

// Each refusal CRIU logs is read as the one it is, whatever else the log
// says; a log without one, or none at all, is no refusal.
func TestRefusalIn(t *testing.T) {
	dir := t.TempDir()
	for line, want := range map[string]report.Key{
		"tty: Found dangling tty with sid 100 pgid 101 (pts) on peer fd 0.":       RefusedTerminal,
		"sockets: Connected TCP socket, consider using --tcp-established option.": RefusedTCP,
		"sockets: External socket is used. Consider using --ext-unix-sk option.":  RefusedUnixSocket,
		"file-lock: Some file locks are hold without --file-locks option":         RefusedFileLock,
		"files: Can't open file x": "",
	} {
		p := filepath.Join(dir, "dump.log")
		if err := os.WriteFile(p, []byte("(00.1) Error (criu/x.c:1): "+line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := RefusalIn(p); got != want {
			t.Errorf("%q: %q, want %q", line, got, want)
		}
	}
	if got := RefusalIn(filepath.Join(dir, "missing.log")); got != "" {
		t.Errorf("missing log: %q", got)
	}
}

// Every refusal is one entry of the log-line table, and its own remedy
// key: Refusals lists each once, and each is what RefusalIn reads from a
// line of the table. A new refusal is one line there; the front ends'
// wording tests then ask for its words.
func TestRefusalsAreKeys(t *testing.T) {
	seen := map[report.Key]bool{}
	for _, k := range Refusals() {
		if k == "" || seen[k] {
			t.Errorf("refusal %q empty or listed twice", k)
		}
		seen[k] = true
	}
	dir := t.TempDir()
	for _, r := range refusals {
		p := filepath.Join(dir, "dump.log")
		if err := os.WriteFile(p, []byte("(00.1) Error (criu/x.c:1): "+r.line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := RefusalIn(p); got != r.r || !seen[got] {
			t.Errorf("%q: %q, want %q among Refusals", r.line, got, r.r)
		}
	}
	for _, k := range []report.Key{RefusedTerminal, RefusedTCP, RefusedUnixSocket, RefusedFileLock} {
		if !seen[k] {
			t.Errorf("%q is not in Refusals", k)
		}
	}
}
