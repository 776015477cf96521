package harness

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/criutest"
	"google.golang.org/protobuf/proto"
)

// mountImage is the mountpoints image of the checkpoint's one mount
// namespace.
func mountImage(t *testing.T, dir string) string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "mountpoints-*.img"))
	if len(names) != 1 {
		t.Fatalf("%s: %d mountpoints images, want 1", dir, len(names))
	}
	return filepath.Base(names[0])
}

func MountAt(t *testing.T, dir, at string) *mnt.MntEntry {
	t.Helper()
	entries, err := criuimg.ReadImage(dir, mountImage(t, dir), &mnt.MntEntry{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if m := e.(*mnt.MntEntry); m.GetMountpoint() == at {
			return m
		}
	}
	t.Fatalf("the checkpoint has no mount at %s", at)
	return nil
}

func EditMountAt(t *testing.T, dir, at string, fn func(*mnt.MntEntry)) {
	t.Helper()
	MountAt(t, dir, at)
	criutest.EditImage(t, dir, mountImage(t, dir), &mnt.MntEntry{}, func(msg proto.Message) {
		if m := msg.(*mnt.MntEntry); m.GetMountpoint() == at {
			fn(m)
		}
	})
}

// MoveDevDump moves the /dev tmpfs dump from tmpfs-dev-<s_dev> to
// tmpfs-<mnt_id>, the name CRIU's tmpfs_restore falls back to, with the
// kernel log and physical memory added.
func MoveDevDump(t *testing.T, dir string) {
	t.Helper()
	dev := MountAt(t, dir, "/dev")
	from := filepath.Join(dir, fmt.Sprintf("tmpfs-dev-%d.tar.gz.img", dev.GetRootDev()))
	to := filepath.Join(dir, fmt.Sprintf("tmpfs-%d.tar.gz.img", dev.GetMntId()))
	addDevNodes(t, from, to, map[string][2]int64{"kmsg": {1, 11}, "mem": {1, 1}})
	if err := os.Remove(from); err != nil {
		t.Fatal(err)
	}
}

// addDevNodes copies a tmpfs dump from to to, with character devices
// added.
func addDevNodes(t *testing.T, from, to string, nodes map[string][2]int64) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	gz, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	zw := gzip.NewWriter(out)
	tw := tar.NewWriter(zw)
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	for name, mm := range nodes {
		if err := tw.WriteHeader(&tar.Header{Name: "./" + name, Typeflag: tar.TypeChar, Devmajor: mm[0], Devminor: mm[1], Mode: 0o666}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}
