package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// UnfinishedState tells the four ends of an unfinished run apart by what
// CRIU left: nothing, a partial dump, a complete one, and a complete one
// abandoned after it (stats-dump removed, the log's success line kept).
func TestUnfinishedState(t *testing.T) {
	write := func(dir, name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what, dir string, want DumpState) {
		t.Helper()
		got, err := UnfinishedState(dir, nil)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", what, got, err, want)
		}
	}
	none := t.TempDir()
	write(none, "pstree.img", "x")
	check("no inventory", none, DumpNotStarted)

	partial := t.TempDir()
	write(partial, criuInventory, "x")
	write(partial, "criu-dump.log", "Error (criu/cr-dump.c): Dumping FAILED.\n")
	check("failed dump", partial, DumpPartial)

	done := t.TempDir()
	write(done, criuInventory, "x")
	write(done, criuStatsDump, "x")
	write(done, "criu-dump.log", "(00.1) Dumping finished successfully\n")
	check("complete dump", done, DumpComplete)

	if err := AbandonDump(done); err != nil {
		t.Fatal(err)
	}
	check("abandoned dump", done, DumpAbandoned)
}

// A directory marked partial keeps CRIU's log, which says whether the
// dump had completed before the run failed.
func TestPartialState(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(dir, "criu-dump.log"), []byte("(00.1) Dumping finished successfully\n"), 0o600)
	if _, err := MarkPartial(dir, errors.New("failed at step manifest: no space left on device")); err != nil {
		t.Fatal(err)
	}
	if st := PartialState(dir); st != DumpStaleRemoved {
		t.Errorf("a completed dump, then a failure: %q", st)
	}
	os.WriteFile(filepath.Join(dir, "criu-dump.log"), []byte("Error: interrupted\n"), 0o600)
	if st := PartialState(dir); st != DumpFailedRemoved {
		t.Errorf("a dump cut short: %q", st)
	}
}
