package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A stream through Bounded reaches its consumer unchanged, and ends at the
// first entry beyond the cap: the consumer sees the entries before it and
// then the LimitError, and never the refused entry.
func TestBoundedEndsAtTheCap(t *testing.T) {
	began := time.Now()
	b := Bounded(context.Background(), emptyFiles(300_000), Options{Limits: Limits{MaxEntries: 1000}, Part: "the rootfs diff"})
	defer b.Close()
	tr := tar.NewReader(b)
	n := 0
	var err error
	for {
		if _, err = tr.Next(); err != nil {
			break
		}
		n++
	}
	var le *LimitError
	if !errors.As(err, &le) || le.Count != 1001 || n != 1000 || !strings.Contains(err.Error(), "the rootfs diff") {
		t.Fatalf("consumer read %d entries, then %v; want 1000, then the LimitError", n, err)
	}
	t.Logf("refused at the cap of 1000 in %s", time.Since(began))
}

func TestBoundedPassesThrough(t *testing.T) {
	ents := []ent{{name: "etc/", typ: tar.TypeDir}, {name: "etc/hosts", typ: tar.TypeReg, body: strings.Repeat("x", 3<<20)}, {name: "l", link: "etc/hosts", typ: tar.TypeSymlink}}
	want := tarOf(t, ents...).Bytes()
	want = append(want, make([]byte, 4096)...) // padding after the end, as layers have
	b := Bounded(context.Background(), bytes.NewReader(want), Options{})
	defer b.Close()
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d of %d bytes (%v), or they differ", len(got), len(want), err)
	}
}

// A consumer that stops early and closes ends the parsing: no goroutine
// is left blocked on the pipe.
func TestBoundedClose(t *testing.T) {
	before := runtime.NumGoroutine()
	b := Bounded(context.Background(), bytes.NewReader(tarOf(t, ent{name: "f", typ: tar.TypeReg, body: strings.Repeat("y", 4<<20)}).Bytes()), Options{})
	buf := make([]byte, 512)
	if _, err := io.ReadFull(b, buf); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), before)
		}
	}
}
