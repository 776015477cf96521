package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// emptyFiles streams a tar of n empty files, written as it is read, so
// that a test of a huge tar costs no memory for it.
func emptyFiles(n int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for i := 0; i < n; i++ {
			if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("checkpoint/f%d", i), Typeflag: tar.TypeReg, Mode: 0o600}); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	return pr
}

// A part of 300 000 empty files is refused at the first entry past the
// cap: what follows it is never read, so the refusal costs no more than
// the entries before it.
func TestExtractRefusesManyEntries(t *testing.T) {
	dir := t.TempDir()
	began := time.Now()
	err := ExtractWith(context.Background(), emptyFiles(300_000), dir, Options{Limits: Limits{MaxEntries: 1000}, Part: "checkpoint part sha256:abc"})
	elapsed := time.Since(began)
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrLimit) || le.What != LimitEntries || le.Count != 1001 || le.Cap != 1000 {
		t.Fatalf("got %v, want a LimitError on entries at 1001 of 1000", err)
	}
	for _, want := range []string{"checkpoint part sha256:abc", "more than 1000 entries", "remedy:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if n := countFiles(t, dir); n != 1000 {
		t.Fatalf("%d files written, want the 1000 before the cap", n)
	}
	t.Logf("300000 empty files refused at the cap of 1000 in %s", elapsed)
}

// With the default cap, 300 000 empty files are refused at entry 100 001.
func TestExtractDefaultCap(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100 000 files")
	}
	began := time.Now()
	err := ExtractWith(context.Background(), emptyFiles(300_000), t.TempDir(), Options{})
	var le *LimitError
	if !errors.As(err, &le) || le.Cap != DefaultMaxEntries || le.Count != DefaultMaxEntries+1 {
		t.Fatalf("got %v, want a LimitError at the default cap", err)
	}
	t.Logf("300000 empty files refused at the default cap of %d in %s", DefaultMaxEntries, time.Since(began))
}

func TestExtractRefusesDeepLongNames(t *testing.T) {
	deep := strings.Repeat("d/", 40) + "f"
	long := strings.Repeat("n", 256)
	path := strings.Repeat(strings.Repeat("p", 200)+"/", 21) + "f"
	cases := map[string]struct {
		ents []ent
		what string
	}{
		"depth":       {[]ent{{name: deep, typ: tar.TypeReg}}, LimitDepth},
		"name":        {[]ent{{name: long, typ: tar.TypeReg}}, LimitName},
		"path":        {[]ent{{name: path, typ: tar.TypeReg}}, LimitPath},
		"link target": {[]ent{{name: "l", link: long, typ: tar.TypeSymlink}}, LimitName},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := ExtractWith(context.Background(), tarOf(t, c.ents...), t.TempDir(), Options{Limits: Limits{MaxDepth: 32}})
			var le *LimitError
			if !errors.As(err, &le) || le.What != c.what {
				t.Fatalf("got %v, want a LimitError on %s", err, c.what)
			}
		})
	}
}

// Every entry costs HeaderCost in the budget: empty files are not free.
func TestBudgetCountsHeaders(t *testing.T) {
	b := &Budget{Left: 10 * HeaderCost, Source: "test budget"}
	ents := make([]ent, 11)
	for i := range ents {
		ents[i] = ent{name: fmt.Sprintf("f%d", i), typ: tar.TypeReg}
	}
	err := ExtractWithin(tarOf(t, ents...), t.TempDir(), b)
	if !errors.Is(err, ErrUnsafeEntry) || !strings.Contains(err.Error(), "test budget") {
		t.Fatalf("11 empty files in a budget of 10 headers: %v, want a refusal naming the budget", err)
	}
}

// A deadline that passes mid-extraction stops it at the next entry, with
// the deadline's cause.
func TestExtractStopsAtDeadline(t *testing.T) {
	cause := errors.New("the test's deadline")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, cause)
	defer cancel()
	began := time.Now()
	err := ExtractWith(ctx, emptyFiles(300_000), t.TempDir(), Options{Limits: Limits{MaxEntries: 1 << 30}})
	if !errors.Is(err, cause) {
		t.Fatalf("got %v, want the deadline's cause", err)
	}
	if d := time.Since(began); d > time.Second {
		t.Fatalf("stopped %s after the start, want right after the 50ms deadline", d)
	}
}

// A checkpoint's layout (a flat CRIU directory under checkpoint/, a few
// files beside it) passes the defaults.
func TestExtractNormalCheckpoint(t *testing.T) {
	ents := []ent{{name: "checkpoint/", typ: tar.TypeDir}, {name: "config.dump", typ: tar.TypeReg, body: "{}"}}
	for i := 0; i < 200; i++ {
		ents = append(ents, ent{name: fmt.Sprintf("checkpoint/core-%d.img", i), typ: tar.TypeReg, body: "core"})
	}
	b := &Budget{Left: 1 << 20, Source: "budget"}
	if err := ExtractWith(context.Background(), tarOf(t, ents...), t.TempDir(), Options{Budget: b}); err != nil {
		t.Fatal(err)
	}
}

func countFiles(t *testing.T, dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, _ error) error {
		if d != nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}
