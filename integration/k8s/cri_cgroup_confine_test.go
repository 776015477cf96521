package k8s

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
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
	ck := harness.Crafted(t, imgs, dir, path)
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
	reg := harness.StartRegistry(t)
	n := harness.StartCRINode(t)
	app := reg.Addr + "/cryo/app:v1"
	n.PublishApp(app)
	src, err := n.ConfinedPod("src-cg", app, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.WaitTicksIn(src.LogPath(), 3)
	archive := filepath.Join(n.Dir, "ck-cg.tar")
	src.Checkpoint(archive)
	src.Remove()
	for _, c := range []struct {
		name      string
		dir, path func(string) string
	}{
		{"RootSlash", func(string) string { return "/" }, func(string) string { return "/" }},
		{"LeadingSlash", func(d string) string { return "/" + d }, harness.Same},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := n.With(t)
			edited := editCgroupArchive(t, archive, c.dir, c.path)
			p := n.NewPod("dst-"+strings.ToLower(c.name), harness.CRIHandler, nil)
			err := p.Create(edited)
			if err == nil {
				err = p.Start()
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
			p.Remove()
		})
	}
	t.Run("InItsPodsCgroup", func(t *testing.T) {
		n := n.With(t)
		p := n.NewPod("dst-cg", harness.CRIHandler, nil)
		if err := p.Create(archive); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
		}
		if !strings.Contains(n.Log(), "manage-cgroups=ignore") {
			t.Errorf("the shim did not restore with manage-cgroups=ignore:\n%s", harness.LastLines(n.Log(), 30))
		}
		pid := criInitPID(t, n, p)
		data, err := os.ReadFile("/proc/" + pid + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("/proc/%s/cgroup of the restored task:\n%s", pid, data)
		var own string
		mounted := harness.MountedHierarchies(t)
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) == 3 && !mounted(parts[1]) {
				continue // no place for a pod there: see assertInCgroup
			}
			if len(parts) != 3 || !strings.HasPrefix(parts[2], n.Cgroup+"/") {
				t.Errorf("the restored task is in %q, outside its pod's cgroup parent %s", l, n.Cgroup)
				continue
			}
			if own == "" {
				own = parts[2]
			} else if parts[2] != own {
				t.Errorf("the restored task is in %q, not in its container's cgroup %s on every hierarchy", l, own)
			}
		}
		p.Remove()
	})
}
