package doctor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The summary counts each status, Failed follows fail alone, the JSON
// names are the documented lowercase ones, and the text has one aligned row
// per check, a fix row under warnings and failures, and the summary last.
func TestReport(t *testing.T) {
	r := newReport([]Check{
		{Name: "kernel", Status: OK, Detail: "6.18"},
		{Name: "driver", Status: Skip, Detail: noDriver},
		{Name: "containerd shim", Status: Warn, Detail: "not found", Fix: "ln -s"},
		{Name: "criu", Status: Fail, Detail: "missing", Fix: "make deps"},
		{Name: "runc", Status: OK, Detail: "1.1.5", Fix: "unused"},
	})
	if r.Summary != (Summary{OK: 2, Skipped: 1, Warnings: 1, Failed: 1}) || !r.Failed() {
		t.Fatalf("summary %+v, failed %v", r.Summary, r.Failed())
	}
	if r.Summary.String() != "2 ok, 1 skipped, 1 warning, 1 failed" {
		t.Fatalf("summary %q, failed %v", r.Summary, r.Failed())
	}
	r.Checks[3].Status = Warn
	if r.Failed() {
		t.Fatal("Failed without a failed check")
	}
	r.Checks[3].Status = Fail

	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	json.Unmarshal(data, &generic)
	first := generic["checks"].([]any)[2].(map[string]any)
	counts, _ := generic["summary"].(map[string]any)
	if counts["ok"] != 2.0 || counts["skipped"] != 1.0 || counts["warnings"] != 1.0 || counts["failed"] != 1.0 || generic["version"] == "" || first["name"] != "containerd shim" || first["status"] != "warn" || first["fix"] != "ln -s" {
		t.Fatalf("JSON %s", data)
	}
	if _, ok := generic["checks"].([]any)[0].(map[string]any)["fix"]; ok {
		t.Errorf("an empty fix is serialised: %s", data)
	}

	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 8 {
		t.Fatalf("%d lines, want 5 checks, 2 fixes and the summary:\n%s", len(lines), buf.String())
	}
	col := strings.Index(lines[0], "6.18")
	for i, l := range map[int]string{1: noDriver, 2: "not found", 3: "fix: ln -s", 4: "missing", 5: "fix: make deps"} {
		if strings.Index(lines[i], l) != col {
			t.Errorf("line %q: %q not in the detail column %d", lines[i], l, col)
		}
	}
	if strings.Contains(buf.String(), "unused") {
		t.Error("the fix of an ok check was printed")
	}
	if !strings.HasPrefix(lines[7], r.Summary.String()) {
		t.Errorf("last line %q, want the summary", lines[7])
	}
}
