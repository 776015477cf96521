package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

type ent struct {
	name, link string
	typ        byte
	body       string
}

func tarOf(t *testing.T, ents ...ent) *bytes.Buffer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return &buf
}

func TestExtractRefuses(t *testing.T) {
	cases := map[string][]ent{
		"traversal":       {{name: "../evil", typ: tar.TypeReg, body: "x"}},
		"absolute":        {{name: "/etc/evil", typ: tar.TypeReg, body: "x"}},
		"symlink escape":  {{name: "l", link: "../../etc", typ: tar.TypeSymlink}},
		"symlink abs":     {{name: "l", link: "/etc", typ: tar.TypeSymlink}},
		"write via link":  {{name: "d", link: ".", typ: tar.TypeSymlink}, {name: "d/f", typ: tar.TypeReg, body: "x"}},
		"char device":     {{name: "null", typ: tar.TypeChar}},
		"block device":    {{name: "sda", typ: tar.TypeBlock}},
		"fifo":            {{name: "p", typ: tar.TypeFifo}},
		"hardlink escape": {{name: "h", link: "../x", typ: tar.TypeLink}},
	}
	for name, ents := range cases {
		t.Run(name, func(t *testing.T) {
			err := Extract(tarOf(t, ents...), t.TempDir())
			if !errors.Is(err, ErrUnsafeEntry) {
				t.Fatalf("got %v, want ErrUnsafeEntry", err)
			}
		})
	}
}

func TestRoundTripPrivate(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "a"), []byte("alpha"), 0o644)
	var buf bytes.Buffer
	if err := Write(&buf, []Entry{{Name: "checkpoint/pages-1.img", Path: filepath.Join(src, "a")}}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := Extract(&buf, dst); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dst, "checkpoint/pages-1.img")
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != FileMode {
		t.Fatalf("extracted file: %v, mode %v", err, st.Mode().Perm())
	}
	if d, _ := os.Stat(filepath.Dir(p)); d.Mode().Perm() != DirMode {
		t.Fatalf("extracted dir mode %v", d.Mode().Perm())
	}
}

func TestTruncatedTar(t *testing.T) {
	b := tarOf(t, ent{name: "f", typ: tar.TypeReg, body: "0123456789"}).Bytes()
	if err := Extract(bytes.NewReader(b[:520]), t.TempDir()); err == nil {
		t.Fatal("truncated tar extracted without error")
	}
}

// A chain of relative links that each look inside, lexically, but lead out
// together: S1 -> ., S2 -> S1/.., …, leak.img -> S13/etc/shadow.
func TestExtractRefusesSymlinkChain(t *testing.T) {
	ents := []ent{{name: "S1", link: ".", typ: tar.TypeSymlink}}
	for i := 2; i <= 13; i++ {
		ents = append(ents, ent{name: fmt.Sprintf("S%d", i), link: fmt.Sprintf("S%d/..", i-1), typ: tar.TypeSymlink})
	}
	ents = append(ents, ent{name: "leak.img", link: "S13/etc/shadow", typ: tar.TypeSymlink})
	dir := filepath.Join(t.TempDir(), "a", "b")
	os.MkdirAll(dir, 0o700)
	err := Extract(tarOf(t, ents...), dir)
	if !errors.Is(err, ErrUnsafeEntry) {
		t.Fatalf("got %v, want ErrUnsafeEntry", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "leak.img")); err == nil {
		t.Error("leak.img was created")
	}
	// Links that stay below their directory are still fine.
	ok := []ent{{name: "d", typ: tar.TypeDir}, {name: "d/f", typ: tar.TypeReg, body: "x"}, {name: "l", link: "d/f", typ: tar.TypeSymlink}, {name: "self", link: ".", typ: tar.TypeSymlink}}
	if err := Extract(tarOf(t, ok...), t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// Extraction stops before the target's file system would have less than
// ReserveBytes free, whatever the layer's compressed size.
func TestExtractSizeCap(t *testing.T) {
	dir := t.TempDir()
	room, err := freeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// A header claiming more than the room: refused before a byte is written.
	tw.WriteHeader(&tar.Header{Name: "pages-1.img", Typeflag: tar.TypeReg, Mode: 0o600, Size: room + 1})
	err = Extract(&buf, dir)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "remedy:") {
		t.Fatalf("got %v, want ErrTooLarge with a remedy", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%d entries written", len(entries))
	}
}

// A budget shared by two extractions (two layers of one image) refuses the
// entry that goes beyond it, before writing it, whichever layer it is in.
func TestExtractWithinBudget(t *testing.T) {
	dir := t.TempDir()
	b := &Budget{Left: 10 + 2*HeaderCost, Source: "10 bytes the image records"}
	if err := ExtractWithin(tarOf(t, ent{name: "a.img", typ: tar.TypeReg, body: "123456"}), dir, b); err != nil {
		t.Fatal(err)
	}
	err := ExtractWithin(tarOf(t, ent{name: "b.img", typ: tar.TypeReg, body: "12345"}), dir, b)
	if !errors.Is(err, ErrUnsafeEntry) || !strings.Contains(err.Error(), "10 bytes the image records") {
		t.Fatalf("got %v, want the budget's refusal", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.img")); err == nil {
		t.Fatal("the refused entry was written")
	}
}

// A skeleton extraction writes the small files and only the size of the
// bulk ones: no data block of theirs reaches the disk.
func TestExtractSkeleton(t *testing.T) {
	dir := t.TempDir()
	pages := strings.Repeat("x", 1<<20)
	r := tarOf(t, ent{name: "checkpoint/inventory.img", typ: tar.TypeReg, body: "inv"},
		ent{name: "checkpoint/pages-1.img", typ: tar.TypeReg, body: pages})
	bulk := func(name string) bool { return strings.HasPrefix(filepath.Base(name), "pages-") }
	if err := ExtractSkeleton(r, dir, bulk); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "checkpoint/inventory.img")); string(b) != "inv" {
		t.Fatalf("inventory.img = %q", b)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "checkpoint/pages-1.img"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 1<<20 || st.Blocks != 0 {
		t.Fatalf("pages-1.img: size %d, %d blocks; want %d bytes and no block", st.Size, st.Blocks, 1<<20)
	}
	// The skeleton keeps the refusals of a full extraction.
	if err := ExtractSkeleton(tarOf(t, ent{name: "../pages-2.img", typ: tar.TypeReg, body: "x"}), dir, bulk); !errors.Is(err, ErrUnsafeEntry) {
		t.Fatalf("got %v, want ErrUnsafeEntry", err)
	}
}

// A tar cut short (inside an entry, or inside a header) and bytes that are
// no tar are refused as a corrupt archive with the remedy, not as Go's
// bare "unexpected EOF" / "invalid tar header".
func TestExtractCorrupt(t *testing.T) {
	whole := tarOf(t, ent{name: "a/pages-1.img", typ: tar.TypeReg, body: strings.Repeat("x", 4096)}).Bytes()
	for name, data := range map[string][]byte{
		"cut inside an entry": whole[:512+1000],
		"cut inside a header": whole[:100],
		"garbage":             bytes.Repeat([]byte("not a tar "), 200),
	} {
		err := Extract(bytes.NewReader(data), t.TempDir())
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "remedy: the archive is cut short or is not a tar") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Tee sees the bytes of every regular file it asks for, with the file just
// created for it, and nothing of the rest; its write error fails the
// extraction.
func TestExtractTee(t *testing.T) {
	dir := t.TempDir()
	got := map[string]*bytes.Buffer{}
	tee := func(name string, f *os.File) io.Writer {
		if f.Name() != filepath.Join(dir, name) {
			t.Errorf("tee of %s: file %s", name, f.Name())
		}
		if name == "skip" {
			return nil
		}
		got[name] = &bytes.Buffer{}
		return got[name]
	}
	big := strings.Repeat("0123456789", copyBuf/5) // two buffers and more
	tr := tarOf(t, ent{name: "a", typ: tar.TypeReg, body: big}, ent{name: "skip", typ: tar.TypeReg, body: "s"},
		ent{name: "d", typ: tar.TypeDir}, ent{name: "l", link: "a", typ: tar.TypeSymlink})
	if err := ExtractWith(context.Background(), tr, dir, Options{Tee: tee}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["a"].String() != big {
		t.Errorf("teed %d files; a: %d bytes, want %d", len(got), got["a"].Len(), len(big))
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "a")); string(data) != big {
		t.Errorf("a on disk: %d bytes, want %d", len(data), len(big))
	}
	fail := func(string, *os.File) io.Writer { return failWriter{} }
	err := ExtractWith(context.Background(), tarOf(t, ent{name: "a", typ: tar.TypeReg, body: "x"}), t.TempDir(), Options{Tee: fail})
	if !errors.Is(err, errTee) {
		t.Errorf("a failing tee: %v, want %v", err, errTee)
	}
}

var errTee = errors.New("tee failed")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errTee }
