package orchestrate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/testsupport"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"google.golang.org/protobuf/proto"

	"github.com/cryo-gpu/cryo/internal/criutest"
)

// unmappedImages copies the tiny checkpoint of criuimg's tests and turns
// its mount 65 into mount 93: a cgroup v1 hierarchy bound into
// /sys/fs/cgroup (named, or of a controller), or a bind mount at /data.
func unmappedImages(t *testing.T, point, opts string, fstype mnt.Fstype) string {
	t.Helper()
	src := filepath.Join("..", "criuimg", "testdata", "tiny")
	dir := t.TempDir()
	testsupport.CopyFiles(t, src, dir)
	criutest.EditImage(t, dir, "mountpoints-9.img", &mnt.MntEntry{}, func(m proto.Message) {
		e := m.(*mnt.MntEntry)
		if e.GetMntId() == 65 {
			e.MntId, e.Mountpoint, e.Options, e.Fstype = proto.Uint32(93), proto.String(point), proto.String(opts), proto.Uint32(uint32(fstype))
			e.ExtKey = proto.String(point)
		}
	})
	return dir
}

// CRIU's restore failure on an unmapped external mount names only the
// mount's ID; the message names the mount, and for a cgroup v1 hierarchy
// that the host no longer has mounted, how to mount it again.
func TestCRIUErrorUnmappedMount(t *testing.T) {
	log := filepath.Join(t.TempDir(), "restore.log")
	line := "(00.004567) Error (criu/mount.c:3141): mnt: No mapping for 93:(null) mountpoint\n"
	if err := os.WriteFile(log, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, point, opts string
		fstype            mnt.Fstype
		want              []string
	}{
		{"named hierarchy", "/sys/fs/cgroup/flaketest", "name=flaketest", mnt.Fstype_CGROUP,
			[]string{"mount 93 is the container's /sys/fs/cgroup/flaketest", "cgroup v1 hierarchy name=flaketest", "no longer has",
				"mount -t cgroup -o none,name=flaketest cgroup /sys/fs/cgroup/flaketest"}},
		{"controller", "/sys/fs/cgroup/net_cls", "net_cls", mnt.Fstype_CGROUP,
			[]string{"cgroup v1 hierarchy net_cls", "mount -t cgroup -o net_cls cgroup /sys/fs/cgroup/net_cls"}},
		{"bind mount", "/data", "", mnt.Fstype_UNSUPPORTED,
			[]string{"mount 93 is the container's mount at /data", "spec does not give it"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &CRIUError{Op: "restore", LogPath: log, Err: errors.New("exit status 1"), Images: unmappedImages(t, c.point, c.opts, c.fstype)}
			msg := e.Error()
			for _, w := range append(c.want, "No mapping for 93:(null) mountpoint") {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
	// Without the images, or for a mount they lack, the line stands alone.
	if msg := (&CRIUError{Op: "restore", LogPath: log, Err: errors.New("exit status 1")}).Error(); strings.Contains(msg, "(mount") {
		t.Errorf("message without images explains a mount: %q", msg)
	}
	if got := unmappedMount("mnt: No mapping for 7:(null) mountpoint", unmappedImages(t, "/data", "", mnt.Fstype_UNSUPPORTED)); got != "" {
		t.Errorf("a mount the images lack is explained: %q", got)
	}
}
