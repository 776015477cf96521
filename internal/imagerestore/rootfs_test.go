package imagerestore

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// A layer tar's files and whiteouts, and a deleted.files list, leave the
// rootfs as it was at the checkpoint; a deleted symlink goes, not its
// target, and a listed path cannot reach outside the rootfs.
func TestApplyRootfs(t *testing.T) {
	rootfs, work, outside := t.TempDir(), t.TempDir(), t.TempDir()
	write(t, filepath.Join(rootfs, "etc/old"), "old")
	write(t, filepath.Join(rootfs, "etc/gone"), "gone")
	write(t, filepath.Join(rootfs, "keep"), "keep")
	write(t, filepath.Join(rootfs, "keep2"), "a path with .. stays inside")
	write(t, filepath.Join(outside, "victim"), "victim")
	must(t, os.Symlink("/keep", filepath.Join(rootfs, "link")))
	must(t, os.Symlink(outside, filepath.Join(rootfs, "out")))

	writeTar(t, filepath.Join(work, rootfsDiffName), map[string]string{
		"marker": "carried", "etc/old": "new", "etc/.wh.gone": "",
	})
	write(t, filepath.Join(work, deletedFilesName), `["/link", "out/victim", "/", "../../keep2"]`)

	p := &Prepared{Dir: work}
	if _, err := p.ApplyRootfs(context.Background(), rootfs); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"marker": "carried", "etc/old": "new", "keep": "keep"} {
		if got, _ := os.ReadFile(filepath.Join(rootfs, path)); string(got) != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	for _, gone := range []string{"etc/gone", "link", "keep2"} {
		if _, err := os.Lstat(filepath.Join(rootfs, gone)); err == nil {
			t.Errorf("%s is still there", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "victim")); err != nil {
		t.Errorf("a listed path reached outside the rootfs: %v", err)
	}
}

// No rootfs diff and no list: nothing changes.
func TestApplyRootfsNone(t *testing.T) {
	rootfs := t.TempDir()
	write(t, filepath.Join(rootfs, "keep"), "keep")
	if n, err := (&Prepared{Dir: t.TempDir()}).ApplyRootfs(context.Background(), rootfs); n != 0 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
}

func writeTar(t *testing.T, path string, files map[string]string) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		must(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(body))
		must(t, err)
	}
	must(t, tw.Close())
	must(t, os.WriteFile(path, b.Bytes(), 0o600))
}

func write(t *testing.T, path, body string) {
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, []byte(body), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The rootfs diff is bounded as the checkpoint's parts are: a diff beyond
// the entries' cap is cut off at the cap, with the LimitError, and the
// entries after it never reach the rootfs.
func TestApplyRootfsBounded(t *testing.T) {
	rootfs, work := t.TempDir(), t.TempDir()
	files := map[string]string{}
	for i := 0; i < 50; i++ {
		files[fmt.Sprintf("f%02d", i)] = ""
	}
	writeTar(t, filepath.Join(work, rootfsDiffName), files)
	p := &Prepared{Dir: work, limits: archive.Limits{MaxEntries: 10}}
	_, err := p.ApplyRootfs(context.Background(), rootfs)
	var le *archive.LimitError
	if !errors.As(err, &le) || le.Cap != 10 || !strings.Contains(err.Error(), "rootfs diff") {
		t.Fatalf("got %v, want the rootfs diff's LimitError at 10", err)
	}
	if entries, _ := os.ReadDir(rootfs); len(entries) > 10 {
		t.Fatalf("%d files applied, want at most the 10 before the cap", len(entries))
	}
}
