package runcwrap

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// cryo-runc's lines, its own and the orchestration's, have runc's shape:
// JSON objects whose level is logrus's word and whose time is RFC 3339,
// which is what Podman and conmon parse out of runc's log.
func TestLogRuncFormat(t *testing.T) {
	var buf bytes.Buffer
	l := &logger{w: &buf, json: true}
	l.warn("container %s: %s", "c1", "no spec")
	l.slog().Info("cryo step done", "id", "c1", "step", "dump")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	for i, want := range []struct{ level, msg string }{{"warning", "container c1: no spec"}, {"info", "cryo step done"}} {
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i, err, lines[i])
		}
		if rec["level"] != want.level || rec["msg"] != want.msg {
			t.Errorf("line %d: level %v msg %v, want %s %q", i, rec["level"], rec["msg"], want.level, want.msg)
		}
		if _, err := time.Parse(time.RFC3339, rec["time"].(string)); err != nil {
			t.Errorf("line %d: time %v is not RFC 3339", i, rec["time"])
		}
	}
	buf.Reset()
	text := &logger{w: &buf}
	text.error("restore of %s failed", "c1")
	if got := buf.String(); !strings.Contains(got, "level=error") || !strings.Contains(got, `msg="cryo-runc: restore of c1 failed"`) {
		t.Fatalf("text line %q", got)
	}
	buf.Reset()
	quiet := &logger{w: &buf, quiet: true}
	quiet.info("checkpoint done")
	quiet.slog().Info("cryo step done")
	if buf.Len() != 0 {
		t.Fatalf("a quiet logger wrote %q", buf.String())
	}
}
