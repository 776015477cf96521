package integration

// The mount tree of a restored pod comes from its spec: a checkpoint whose
// mountpoints image turns a mask or a read-only path into a live kernel
// file system, or whose /dev dump brings host devices under the name CRIU
// falls back to, is refused through containerd 2.x's CRI, and the pod
// never runs.

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"google.golang.org/protobuf/proto"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/criutest"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// mountAttacks edit the CRIU images of a baseline pod's checkpoint
// (dir) as an attacker would; want is what the refusal must name.
var mountAttacks = []struct {
	name string
	edit func(t *testing.T, dir string)
	want []string
}{
	{"MaskMadeWritableProc", func(t *testing.T, dir string) {
		proc := mountAt(t, dir, "/proc")
		editMountAt(t, dir, "/proc/acpi", func(m *mnt.MntEntry) {
			rw := m.GetFlags() &^ 1
			m.Fstype, m.RootDev, m.Source, m.Root, m.Flags, m.SbFlags = proc.Fstype, proc.RootDev, proc.Source, proto.String("/"), &rw, proto.Uint32(0)
		})
	}, []string{"masked path /proc/acpi", "proc", "writable"}},
	{"ReadOnlyPathMadeWritable", func(t *testing.T, dir string) {
		editMountAt(t, dir, "/proc/sys", func(m *mnt.MntEntry) {
			rw := m.GetFlags() &^ 1
			m.Flags = &rw
		})
	}, []string{"read-only path /proc/sys", `root "/sys"`, "writable"}},
	{"ReadOnlyPathMadeWritableProc", func(t *testing.T, dir string) {
		editMountAt(t, dir, "/proc/sys", func(m *mnt.MntEntry) {
			rw := m.GetFlags() &^ 1
			m.Root, m.Flags = proto.String("/"), &rw
		})
	}, []string{"read-only path /proc/sys", "writable"}},
	{"MaskMadeSysfs", func(t *testing.T, dir string) {
		sys := mountAt(t, dir, "/sys")
		editMountAt(t, dir, "/sys/firmware", func(m *mnt.MntEntry) {
			m.Fstype, m.RootDev, m.Source = sys.Fstype, sys.RootDev, sys.Source
		})
	}, []string{"masked path /sys/firmware", "sysfs"}},
	{"DevDumpUnderMountID", moveDevDump, []string{"device /dev/", "c 1:"}},
}

func TestCRIMountAttacks(t *testing.T) {
	reg := startRegistry(t)
	n := startCRINode(t)
	app := reg.addr + "/cryo/app:v1"
	n.publishApp(app)
	for _, tc := range mountAttacks {
		t.Run(tc.name, func(t *testing.T) {
			n := n.with(t)
			// A source pod of its own: runnable images of one source share
			// their config, and which checkpoint part the shim reads for
			// such images is another matter than the mount tree's.
			src, err := n.confinedPod("src-"+strings.ToLower(tc.name), app, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			n.waitTicksIn(src.logPath(), 3)
			archive := filepath.Join(n.dir, "ck-"+tc.name+".tar")
			src.checkpoint(archive)
			src.remove()
			edited := editArchive(t, archive, tc.edit)
			image := n.ckImage(reg, edited, strings.ToLower(tc.name))
			dst, err := n.confinedPod("dst-"+strings.ToLower(tc.name), image, nil, nil)
			if err == nil {
				t.Fatalf("the restore of a checkpoint with %s was not refused", tc.name)
			}
			for _, w := range append([]string{"confine", "nothing was restored"}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal lacks %q: %v", w, err)
				}
			}
			t.Logf("refused: %v", err)
			if dst.container != "" {
				if st := dst.status().GetState(); st == criapi.ContainerState_CONTAINER_RUNNING {
					t.Errorf("the refused pod's container is %s", st)
				}
			}
			dst.remove()
		})
	}
}

// editArchive unpacks a CRI checkpoint archive, edits the CRIU images in
// its checkpoint/ directory, re-seals cryo's manifest over them and packs
// it again.
func editArchive(t *testing.T, archive string, edit func(*testing.T, string)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "archive")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v\n%s", archive, err, out)
	}
	ck := filepath.Join(dir, "checkpoint")
	edit(t, ck)
	if _, err := manifest.Read(ck); err == nil {
		reseal(t, ck)
	}
	out := filepath.Join(t.TempDir(), "edited.tar")
	if b, err := exec.Command("tar", "-cf", out, "-C", dir, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	return out
}

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

func mountAt(t *testing.T, dir, at string) *mnt.MntEntry {
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

func editMountAt(t *testing.T, dir, at string, fn func(*mnt.MntEntry)) {
	t.Helper()
	mountAt(t, dir, at)
	criutest.EditImage(t, dir, mountImage(t, dir), &mnt.MntEntry{}, func(msg proto.Message) {
		if m := msg.(*mnt.MntEntry); m.GetMountpoint() == at {
			fn(m)
		}
	})
}

// moveDevDump moves the /dev tmpfs dump from tmpfs-dev-<s_dev> to
// tmpfs-<mnt_id>, the name CRIU's tmpfs_restore falls back to, with the
// kernel log and physical memory added.
func moveDevDump(t *testing.T, dir string) {
	t.Helper()
	dev := mountAt(t, dir, "/dev")
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
