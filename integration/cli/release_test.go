package cli

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// The release is built once per test binary, into bin/release-test (each
// build takes most of a minute): TestReleaseChroot and
// TestReleaseInstallRoot share it.
var release struct {
	once              sync.Once
	tarball, deb, ver string
	err               error
}

func builtRelease(t *testing.T) (tarball, deb, version string) {
	t.Helper()
	release.once.Do(func() {
		release.tarball, release.deb, release.ver, release.err = buildRelease(filepath.Join(harness.BinDir(), "release-test"))
	})
	if release.err != nil {
		t.Fatal(release.err)
	}
	return release.tarball, release.deb, release.ver
}

// buildRelease runs contrib/release/release.sh on bin/cryo (make build)
// into out, checks SHA256SUMS, and returns the tarball, the .deb and the
// version they carry.
func buildRelease(out string) (tarball, deb, version string, err error) {
	line, err := harness.RunErr(time.Minute, nil, filepath.Join(harness.BinDir(), "cryo"), "--version")
	f := strings.Fields(line)
	if err != nil || len(f) < 2 {
		return "", "", "", fmt.Errorf("cryo --version: %v: %q (run make build)", err, line)
	}
	version = f[1]
	os.RemoveAll(out)
	if res, err := harness.RunErr(5*time.Minute, nil, "bash", filepath.Join(harness.RepoRoot(), "contrib/release/release.sh"), out, version); err != nil {
		return "", "", "", fmt.Errorf("release.sh: %v\n%s", err, res)
	}
	tarball = filepath.Join(out, "cryo-"+version+"-linux-amd64.tar.gz")
	debs, _ := filepath.Glob(filepath.Join(out, "cryo_*_amd64.deb"))
	if len(debs) != 1 {
		return "", "", "", fmt.Errorf("release.sh made %d .deb files in %s, want 1", len(debs), out)
	}
	sums, err := harness.RunErr(time.Minute, nil, "bash", "-c", "cd "+out+" && sha256sum -c SHA256SUMS")
	if err != nil || !strings.Contains(sums, filepath.Base(tarball)+": OK") || !strings.Contains(sums, filepath.Base(debs[0])+": OK") {
		return "", "", "", fmt.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, sums)
	}
	return tarball, debs[0], version, nil
}

// TestReleaseChroot installs the release tarball on bare Debian 12 and 13
// root file systems (debootstrap minbase, cached under
// /var/cache/cryo-release-chroot) and checks that its binaries load there
// with only the host's glibc, that CRIU's check passes and CRIU dumps and
// restores a process, that uninstall.sh leaves the tree as it found it,
// and that the .deb installs and purges cleanly
// (contrib/release/chroot-test.sh does the steps).
func TestReleaseChroot(t *testing.T) {
	harness.RequireRoot(t)
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatalf("debootstrap missing: run `make deps` (contrib/install-deps.sh installs it)")
	}
	tarball, deb, version := builtRelease(t)
	for _, suite := range []string{"bookworm", "trixie"} {
		t.Run(suite, func(t *testing.T) {
			out := t.TempDir()
			start := time.Now()
			res, err := harness.RunErr(10*time.Minute, nil, "bash", filepath.Join(harness.RepoRoot(), "contrib/release/chroot-test.sh"), suite, tarball, deb, out)
			t.Logf("%s chroot: %.1f s", suite, time.Since(start).Seconds())
			if err != nil {
				t.Fatalf("chroot-test.sh %s: %v\n%s\ninstall: %s\nuninstall: %s", suite, err, res,
					readOut(out, "install.log"), readOut(out, "uninstall.log"))
			}
			checkChroot(t, out, version)
		})
	}
}

func readOut(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return string(b)
}

func checkChroot(t *testing.T, out, version string) {
	t.Helper()
	harness.WantIn(t, readOut(out, "version.txt"), "cryo "+version+" ", "criu:   4.2.1 (/usr/local/sbin/criu)")
	harness.WantIn(t, readOut(out, "criu-version.txt"), "Version: 4.2.1")
	harness.WantIn(t, readOut(out, "kubectl-cryo.txt"), "kubectl cryo drives cryo's Checkpoint API")
	// CRIU's libraries come from the release, glibc from the chroot.
	ldd := readOut(out, "ldd.txt")
	harness.WantIn(t, ldd, "/usr/local/sbin/../lib/cryo/libprotobuf-c.so.1", "/usr/local/sbin/../lib/cryo/libnftables.so.1")
	if strings.Contains(ldd, "not found") {
		t.Errorf("CRIU misses libraries in the chroot:\n%s", ldd)
	}
	checkDoctor(t, out)
	// The release's CRIU dumps a process (which then exits) and restores it.
	dump := readOut(out, "criu-dump.txt")
	harness.WantIn(t, dump, "dumped ok", "gone after dump", "restored sleep")
	if strings.Contains(dump, "Error") {
		t.Errorf("CRIU in the chroot:\n%s", dump)
	}
	harness.WantIn(t, readOut(out, "install.log"), "installed cryo "+version)
	if d := readOut(out, "leftover-tarball.txt"); d != "" {
		t.Errorf("uninstall.sh left the tree changed (< before, > after):\n%s", d)
	}
	harness.WantIn(t, readOut(out, "deb-version.txt"), "cryo "+version+" ", "Version: 4.2.1")
	harness.WantIn(t, readOut(out, "dpkg-install.log"), "Nothing was restarted")
	if d := readOut(out, "leftover-deb.txt"); d != "" {
		t.Errorf("dpkg --purge cryo left the tree changed (< before, > after):\n%s", d)
	}
}

// checkDoctor judges the checks that a chroot can answer: the ones about
// the kernel and the front ends' services may fail there (no runc,
// containerd or Podman in a minbase chroot), but cryo must find the
// release's CRIU, know it as cryo's patched build, see that runc would run
// the same one, pass CRIU's own check, and accept the release's
// cryo-runc.env.
func checkDoctor(t *testing.T, out string) {
	t.Helper()
	var r struct {
		Checks []struct{ Name, Status, Detail string } `json:"checks"`
	}
	if err := json.Unmarshal([]byte(readOut(out, "doctor.json")), &r); err != nil {
		t.Fatalf("cryo doctor --json: %v\n%s\n%s", err, readOut(out, "doctor.json"), readOut(out, "doctor.err"))
	}
	got := map[string]string{}
	for _, c := range r.Checks {
		got[c.Name] = c.Status + ": " + c.Detail
	}
	// With the chroot's root a mount and the host's /proc and /dev, CRIU's
	// own check passes ("Looks good").
	for _, name := range []string{"criu", "criu check", "criu fill", "criu hold", "criu zero", "runc criu", "cryo-runc env"} {
		if !strings.HasPrefix(got[name], "ok: ") {
			t.Errorf("doctor's %q check in the chroot: %q, want ok", name, got[name])
		}
	}
	t.Logf("doctor in the chroot: criu %q; criu check %q", got["criu"], got["criu check"])
}

// TestReleaseContainerdDropIn: the release's containerd 2.x drop-in, imported
// by a config.toml of containerd's own with a CRI table, adds runtime
// "cryo" with the cryo.io/* pod annotations and keeps what config.toml says.
func TestReleaseContainerdDropIn(t *testing.T) {
	dir := t.TempDir()
	dropin := filepath.Join(dir, "conf.d", "cryo.toml")
	harness.CopyFile(t, filepath.Join(harness.RepoRoot(), "contrib/containerd/config-2.toml"), dropin, 0o644)
	main := filepath.Join(dir, "config.toml")
	os.WriteFile(main, []byte(`version = 3
imports = ["`+filepath.Dir(dropin)+`/*.toml"]
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
`), 0o644)
	dump := harness.Run(t, time.Minute, nil, filepath.Join(harness.DepsDir(), "containerd-2/usr/bin/containerd"), "--config", main, "config", "dump")
	harness.WantIn(t, dump, "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.cryo]",
		"runtime_type = 'io.containerd.cryo.v2'", "pod_annotations = ['cryo.io/*']",
		"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]", "default_runtime_name = 'runc'")
}

// TestReleaseInstallRoot: install.sh --root, as an installer image runs it
// against a host's root, moves a file that was there before aside and
// uninstall.sh puts it back; a second install removes what an earlier
// release had and this one lacks; after uninstall.sh the tree is as it was.
func TestReleaseInstallRoot(t *testing.T) {
	harness.RequireRoot(t)
	tarball, _, version := builtRelease(t)
	unpacked := t.TempDir()
	harness.Run(t, time.Minute, nil, "tar", "-C", unpacked, "-xzf", tarball)
	rel := filepath.Join(unpacked, "cryo-"+version+"-linux-amd64")
	root := t.TempDir()
	theirs := filepath.Join(root, "usr/local/bin/cryo-runc")
	os.MkdirAll(filepath.Dir(theirs), 0o755)
	os.WriteFile(theirs, []byte("theirs\n"), 0o755)
	before := treeOf(t, root)

	out := harness.Run(t, time.Minute, nil, "sh", filepath.Join(rel, "install.sh"), "--root", root)
	harness.WantIn(t, out, "moved the existing "+theirs+" aside", "installed cryo "+version)
	if l, err := os.Readlink(theirs); err != nil || l != "cryo" {
		t.Errorf("%s after install: link %q (%v), want a link to cryo", theirs, l, err)
	}
	for _, p := range []string{"usr/local/bin/cryo", "usr/local/sbin/criu", "usr/local/lib/cryo/libprotobuf-c.so.1",
		"etc/containerd/conf.d/cryo.toml", "etc/containers/containers.conf.d/cryo.conf", "usr/local/share/man/man1/cryo.1"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
			t.Errorf("install.sh --root placed no %s: %v", p, err)
		}
	}

	// A file of an earlier release, in the manifest: the next install removes it.
	stale := filepath.Join(root, "usr/local/bin/cryo-stale")
	os.WriteFile(stale, nil, 0o755)
	manifest := filepath.Join(root, "var/lib/cryo/install/manifest")
	m, _ := os.ReadFile(manifest)
	os.WriteFile(manifest, append(append([]byte(nil), m...), "f usr/local/bin/cryo-stale\n"...), 0o644)
	harness.WantIn(t, harness.Run(t, time.Minute, nil, "sh", filepath.Join(rel, "install.sh"), "--root", root), "removed "+stale+" (not in this release)")
	if again, _ := os.ReadFile(manifest); string(again) != string(m) {
		t.Errorf("the manifest changed on a second install:\n%s\nwant:\n%s", again, m)
	}

	out = harness.Run(t, time.Minute, nil, "sh", filepath.Join(root, "var/lib/cryo/install/uninstall.sh"), "--root", root)
	harness.WantIn(t, out, "put back the "+theirs, "of cryo "+version+" from "+root)
	if b, _ := os.ReadFile(theirs); string(b) != "theirs\n" {
		t.Errorf("%s after uninstall: %q, want the file that was there before", theirs, b)
	}
	if after := treeOf(t, root); !slices.Equal(before, after) {
		t.Errorf("uninstall.sh left the tree changed:\nbefore %v\nafter  %v", before, after)
	}
}

// treeOf lists every path under root, relative to it.
func treeOf(t *testing.T, root string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}
