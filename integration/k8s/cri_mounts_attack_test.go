package k8s

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"google.golang.org/protobuf/proto"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// mountAttacks edit the CRIU images of a baseline pod's checkpoint
// (dir) as an attacker would; want is what the refusal must name.
var mountAttacks = []struct {
	name string
	edit func(t *testing.T, dir string)
	want []string
}{
	{"MaskMadeWritableProc", func(t *testing.T, dir string) {
		proc := harness.MountAt(t, dir, "/proc")
		harness.EditMountAt(t, dir, "/proc/acpi", func(m *mnt.MntEntry) {
			rw := m.GetFlags() &^ 1
			m.Fstype, m.RootDev, m.Source, m.Root, m.Flags, m.SbFlags = proc.Fstype, proc.RootDev, proc.Source, proto.String("/"), &rw, proto.Uint32(0)
		})
	}, []string{"masked path /proc/acpi", "proc", "writable"}},
	{"ReadOnlyPathMadeWritable", func(t *testing.T, dir string) {
		harness.EditMountAt(t, dir, "/proc/sys", func(m *mnt.MntEntry) {
			rw := m.GetFlags() &^ 1
			m.Flags = &rw
		})
	}, []string{"read-only path /proc/sys", `root "/sys"`, "writable"}},
	{"ReadOnlyPathMadeWritableProc", func(t *testing.T, dir string) {
		harness.EditMountAt(t, dir, "/proc/sys", func(m *mnt.MntEntry) {
			rw := m.GetFlags() &^ 1
			m.Root, m.Flags = proto.String("/"), &rw
		})
	}, []string{"read-only path /proc/sys", "writable"}},
	{"MaskMadeSysfs", func(t *testing.T, dir string) {
		sys := harness.MountAt(t, dir, "/sys")
		harness.EditMountAt(t, dir, "/sys/firmware", func(m *mnt.MntEntry) {
			m.Fstype, m.RootDev, m.Source = sys.Fstype, sys.RootDev, sys.Source
		})
	}, []string{"masked path /sys/firmware", "sysfs"}},
	{"DevDumpUnderMountID", harness.MoveDevDump, []string{"device /dev/", "c 1:"}},
}

func TestCRIMountAttacks(t *testing.T) {
	reg := harness.StartRegistry(t)
	n := harness.StartCRINode(t)
	app := reg.Addr + "/cryo/app:v1"
	n.PublishApp(app)
	for _, tc := range mountAttacks {
		t.Run(tc.name, func(t *testing.T) {
			n := n.With(t)
			// A source pod of its own: runnable images of one source share
			// their config, and which checkpoint part the shim reads for
			// such images is another matter than the mount tree's.
			src, err := n.ConfinedPod("src-"+strings.ToLower(tc.name), app, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			n.WaitTicksIn(src.LogPath(), 3)
			archive := filepath.Join(n.Dir, "ck-"+tc.name+".tar")
			src.Checkpoint(archive)
			src.Remove()
			edited := editArchive(t, archive, tc.edit)
			image := n.CkImage(reg, edited, strings.ToLower(tc.name))
			dst, err := n.ConfinedPod("dst-"+strings.ToLower(tc.name), image, nil, nil)
			if err == nil {
				t.Fatalf("the restore of a checkpoint with %s was not refused", tc.name)
			}
			for _, w := range append([]string{"confine", "nothing was restored"}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal lacks %q: %v", w, err)
				}
			}
			t.Logf("refused: %v", err)
			if dst.Container != "" {
				if st := dst.Status().GetState(); st == criapi.ContainerState_CONTAINER_RUNNING {
					t.Errorf("the refused pod's container is %s", st)
				}
			}
			dst.Remove()
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
		harness.Reseal(t, ck)
	}
	out := filepath.Join(t.TempDir(), "edited.tar")
	if b, err := exec.Command("tar", "-cf", out, "-C", dir, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	return out
}
