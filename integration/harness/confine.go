package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/criutest"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"google.golang.org/protobuf/proto"
)

// HostCapBnd is this process's bounding set.
func HostCapBnd() uint64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// RestrictedUID is the uid of a restricted source: 1000, except where root
// lacks CAP_SYS_RESOURCE (some VMs), without which CRIU cannot read the
// rlimits of a process of another user and so cannot dump it at all.
func RestrictedUID(t *testing.T) uint32 {
	if HostCapBnd()&(1<<24) == 0 {
		t.Log("root lacks CAP_SYS_RESOURCE here: CRIU cannot dump a process of another uid, so the restricted source runs as uid 0 (no capabilities, no_new_privs, seccomp)")
		return 0
	}
	return 1000
}

// CopyDir copies a checkpoint directory (flat: CRIU images and cryo's
// manifest).
func CopyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "edited")
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	return dst
}

// EditImage rewrites the entries of one CRIU image through edit, and
// re-seals cryo's manifest over the changed files, as an attacker with
// go-criu and cryo's own format would.
func EditImage(t *testing.T, dir, name string, msg proto.Message, edit func(proto.Message)) {
	t.Helper()
	criutest.EditImage(t, dir, name, msg, edit)
	Reseal(t, dir)
}

// Reseal recomputes the digests in cryo's manifest.
func Reseal(t *testing.T, dir string) {
	t.Helper()
	m, err := manifest.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Digests, err = digest.Files(dir); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(dir, m); err != nil {
		t.Fatal(err)
	}
}
