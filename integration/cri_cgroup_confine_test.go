package integration

// The crafted cgroup.img through containerd 2.x's CRI, as a
// kubelet drives it: a pod's checkpoint archive whose cgroup.img names the
// host's root cgroups ("/" for every directory and member), or directories
// with a leading "/", restored by containerd's own CRI restore in a cryo
// pod, is refused before runc restore; the archive as it was comes back
// inside its pod's cgroup on every hierarchy.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// editCgroupArchive unpacks a CRI checkpoint archive, rewrites its cgroup.img
// through crafted's edits (which seal cryo's manifest, in checkpoint/,
// again over the changed file), and packs it anew, as an attacker with the tools anyone has would.
func editCgroupArchive(t *testing.T, archive string, dir, path func(string) string) string {
	t.Helper()
	work := t.TempDir()
	if out, err := exec.Command("tar", "-xf", archive, "-C", work).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v\n%s", err, out)
	}
	imgs := filepath.Join(work, "checkpoint")
	ck := crafted(t, imgs, dir, path)
	if err := os.RemoveAll(imgs); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", ck, imgs).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(work)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-cf", archive + ".edited", "-C", work}
	for _, e := range entries {
		args = append(args, e.Name())
	}
	if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	return archive + ".edited"
}

func TestCRICgroupCrafted(t *testing.T) {
	reg := startRegistry(t)
	n := startCRINode(t)
	app := reg.addr + "/cryo/app:v1"
	n.publishApp(app)
	src, err := n.confinedPod("src-cg", app, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.waitTicksIn(src.logPath(), 3)
	archive := filepath.Join(n.dir, "ck-cg.tar")
	src.checkpoint(archive)
	src.remove()
	for _, c := range []struct {
		name      string
		dir, path func(string) string
	}{
		{"RootSlash", func(string) string { return "/" }, func(string) string { return "/" }},
		{"LeadingSlash", func(d string) string { return "/" + d }, same},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := n.with(t)
			edited := editCgroupArchive(t, archive, c.dir, c.path)
			p := n.newPod("dst-"+strings.ToLower(c.name), criHandler, nil)
			err := p.create(edited)
			if err == nil {
				err = p.start()
			}
			if err == nil {
				pid := criInitPID(t, n, p)
				cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
				t.Fatalf("the crafted checkpoint was restored; /proc/%s/cgroup:\n%s", pid, cg)
			}
			t.Logf("refused: %v", err)
			for _, w := range []string{"confine", "cgroup path", "outside the container's cgroup", "nothing was restored"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal lacks %q: %v", w, err)
				}
			}
			p.remove()
		})
	}
	t.Run("InItsPodsCgroup", func(t *testing.T) {
		n := n.with(t)
		p := n.newPod("dst-cg", criHandler, nil)
		if err := p.create(archive); err != nil {
			t.Fatal(err)
		}
		if err := p.start(); err != nil {
			t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
		}
		if !strings.Contains(n.log(), "manage-cgroups=ignore") {
			t.Errorf("the shim did not restore with manage-cgroups=ignore:\n%s", lastLines(n.log(), 30))
		}
		pid := criInitPID(t, n, p)
		data, err := os.ReadFile("/proc/" + pid + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("/proc/%s/cgroup of the restored task:\n%s", pid, data)
		var own string
		mounted := mountedHierarchies(t)
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) == 3 && !mounted(parts[1]) {
				continue // no place for a pod there: see assertInCgroup
			}
			if len(parts) != 3 || !strings.HasPrefix(parts[2], n.cgroup+"/") {
				t.Errorf("the restored task is in %q, outside its pod's cgroup parent %s", l, n.cgroup)
				continue
			}
			if own == "" {
				own = parts[2]
			} else if parts[2] != own {
				t.Errorf("the restored task is in %q, not in its container's cgroup %s on every hierarchy", l, own)
			}
		}
		p.remove()
	})
}
