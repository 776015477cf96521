package k8s

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
)

// upgradeVersion is release B's version, stamped into its cryo.
const upgradeVersion = "v99.0.0-upgrade"

// helmRel is one release: one installer image: its tag and the cryo it ships.
type helmRel struct {
	tag, bin, version string
}

// buildRelease builds cryo as make build does, with version stamped, into
// its own directory, and the installer image of it, tagged tag.
func (c *k8sCluster) buildRelease(tag, version string) helmRel {
	c.t.Helper()
	r := helmRel{tag: tag, bin: filepath.Join(c.dir, "release-"+tag, "bin", "cryo"), version: version}
	mkdirAll(c.t, filepath.Dir(r.bin))
	ld := "-s -w -X github.com/cryo-gpu/cryo/internal/version.Version=" + version
	took := time.Now()
	out, err := harness.RunErr(5*time.Minute, []string{"CGO_ENABLED=1"}, "go", "-C", harness.RepoRoot(), "build", "-trimpath",
		"-ldflags", ld, "-o", r.bin, "./cmd/cryo")
	if err != nil {
		c.t.Fatalf("build cryo %s: %v\n%s", version, err, out)
	}
	c.t.Logf("cryo %s built in %s", version, time.Since(took).Round(time.Millisecond))
	c.loadInstallerImageFrom(strings.Split(installerRef, ":")[0]+":"+tag, r.bin, "")
	return r
}

// nodeVersion is what the node's installed cryo and shim say they are.
func (c *k8sCluster) nodeVersion(hn helmNode) (cli, shim string) {
	c.t.Helper()
	bin := filepath.Join(hn.host, "usr/local/bin")
	out, err := harness.RunErr(30*time.Second, nil, filepath.Join(bin, "cryo"), "version")
	if err != nil {
		c.t.Fatalf("cryo version on the node: %v\n%s", err, out)
	}
	s, err := harness.RunErr(30*time.Second, nil, filepath.Join(bin, "containerd-shim-cryo-v2"), "-v")
	if err != nil {
		c.t.Fatalf("containerd-shim-cryo-v2 -v on the node: %v\n%s", err, s)
	}
	return strings.TrimSpace(out), strings.TrimSpace(s)
}

// wantRelease fails unless the node's binary is r's, byte for byte, and
// both of its names say r's version.
func (c *k8sCluster) wantRelease(hn helmNode, r helmRel) {
	c.t.Helper()
	if got, want := fileSum(c.t, filepath.Join(hn.host, "usr/local/bin/cryo")), fileSum(c.t, r.bin); got != want {
		c.t.Errorf("the node's cryo is sha256:%s, want release %s's sha256:%s", got, r.tag, want)
	}
	cli, shim := c.nodeVersion(hn)
	if !strings.Contains(cli, "cryo "+r.version+" ") || !strings.Contains(shim, "Version:  "+r.version+"\n") {
		c.t.Errorf("the node's cryo says %q and its shim %q; want version %s", cli, shim, r.version)
	}
}

func fileSum(t interface{ Fatal(...any) }, p string) string {
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

// shimExe is the executable of the shim that runs the pod's container:
// the shim whose command line names the pod's sandbox, as containerd
// starts it (-id SANDBOX).
func (c *k8sCluster) shimExe(ns, pod string) string {
	c.t.Helper()
	ctrs := c.criContainers(ns, pod)
	if len(ctrs) == 0 {
		c.t.Fatalf("no CRI container for %s/%s", ns, pod)
	}
	sandbox := ctrs[0].PodSandboxId
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmds {
		cmd, _ := os.ReadFile(f)
		args := strings.Split(string(cmd), "\x00")
		if !strings.HasSuffix(args[0], "containerd-shim-cryo-v2") || !strings.Contains(string(cmd), "\x00"+sandbox+"\x00") {
			continue
		}
		exe, _ := os.Readlink(filepath.Join(filepath.Dir(f), "exe"))
		return exe
	}
	c.t.Fatalf("no containerd-shim-cryo-v2 runs sandbox %s of %s/%s", sandbox, ns, pod)
	return ""
}

// archiveCryoVersion is the cryo_version of the manifest in a kubelet
// checkpoint archive: the cryo that wrote the checkpoint.
func archiveCryoVersion(t testing.TB, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s in %s: %v", digest.ManifestName, archive, err)
		}
		if filepath.Base(h.Name) != digest.ManifestName {
			continue
		}
		var m struct {
			CryoVersion string `json:"cryo_version"`
		}
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			t.Fatalf("%s in %s: %v", h.Name, archive, err)
		}
		return m.CryoVersion
	}
}

// rollTo replaces the installer's pod after helm changed the DaemonSet,
// as the DaemonSet controller does in a rolling update.
func (c *k8sCluster) rollTo() {
	c.t.Helper()
	c.kubectl("delete", "pod", "-n", helmNamespace, helmDaemonSet+"-node", "--wait=true", "--timeout=2m")
	if got := c.nodeLabels()["cryo.io/runtime"]; got != "ready" {
		c.t.Fatalf("after the old installer stopped in a rollout: cryo.io/runtime=%q, want ready", got)
	}
	c.playDaemonSetController()
	// The label still reads ready from the old pod: the new one's log
	// says when it has installed and labelled the node.
	pod := helmDaemonSet + "-node"
	harness.WaitFor(c.t, 3*time.Minute, "the new installer to label the node", func() bool {
		out, err := c.kubectlErr("logs", "-n", helmNamespace, pod)
		return err == nil && strings.Contains(out, "labelled node "+k8sNodeName+" cryo.io/runtime=ready")
	})
	c.waitNodeLabel("ready")
}

// pathsOf are the names in a snapshot.
func pathsOf(snap map[string]string) string {
	var ps []string
	for p := range snap {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return strings.Join(ps, "\n")
}

// releaseOf is the release bin/cryo is, as the installer image tag installerRef.
func releaseOf(t testing.TB) helmRel {
	t.Helper()
	bin := harness.CryoBin(t, "cryo")
	out, err := harness.RunErr(30*time.Second, nil, bin, "version")
	f := strings.Fields(out)
	if err != nil || len(f) < 2 {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	return helmRel{tag: strings.Split(installerRef, ":")[1], bin: bin, version: f[1]}
}

// testHelmUpgrade: helm upgrade from A (bin/cryo) to B (another cryo,
// another version) while a cryo pod and a runc pod run. The node's cryo
// becomes B's; containerd is not restarted (its configuration is the
// same); both pods run on, the cryo pod under A's shim, which still
// checkpoints it; a new cryo pod runs under B's shim; the RuntimeClass is
// the same object; the node holds the same paths as under A, and the
// install record still holds the node's state from before cryo, so that
// uninstall restores it (TestKubeletHelm's last check). helm rollback then
// puts A back.
func testHelmUpgrade(c *k8sCluster, hn helmNode, helm, chart string, a helmRel, reg *harness.PrivateRegistry) {
	b := c.buildRelease("b", upgradeVersion)
	c.wantRelease(hn, a)
	c.RunPod(appPod(nsApps, "steady", c.app, podOpts{}))
	c.waitPod(nsApps, "steady", "Running")
	c.RunPod(plainPod(nsApps, "plain", c.app))
	c.waitPod(nsApps, "plain", "Running")
	rc := c.kubectl("get", "runtimeclass", "cryo", "-o", "jsonpath={.metadata.uid}")
	pid, before := c.containerdPid(hn), c.helmSnapshot(hn)
	record := filepath.Join(hn.host, "var/lib/cryo/node-install/record.json")
	rec, _ := os.ReadFile(record)

	took := time.Now()
	c.helm(helm, "upgrade", helmRelease, chart, "-n", helmNamespace, "-f", hn.values, "--set-string", "image.tag="+b.tag)
	c.rollTo()
	c.t.Logf("helm upgrade to %s: node ready %s after", b.version, time.Since(took).Round(time.Millisecond))
	c.wantRelease(hn, b)
	if got := c.containerdPid(hn); got != pid {
		c.t.Errorf("the upgrade restarted containerd (pid %d, was %d): its configuration did not change", got, pid)
	}
	if got := pathsOf(c.helmSnapshot(hn)); got != pathsOf(before) {
		c.t.Errorf("the node's paths after the upgrade:\n%s\nwant those under A:\n%s", got, pathsOf(before))
	}
	if now, _ := os.ReadFile(record); string(now) != string(rec) {
		c.t.Errorf("the upgrade changed the install record:\n%s\nwas:\n%s", now, rec)
	}
	if got := c.kubectl("get", "runtimeclass", "cryo", "-o", "jsonpath={.metadata.uid}"); got != rc {
		c.t.Errorf("RuntimeClass cryo is a new object after the upgrade (uid %s, was %s)", got, rc)
	}
	testHelmMixedShims(c, hn, a, reg)
	c.kubectl("delete", "pod", "-n", nsApps, "steady", "plain", "--wait=true", "--timeout=2m")

	took = time.Now()
	c.helm(helm, "rollback", helmRelease, "1", "-n", helmNamespace)
	c.rollTo()
	c.t.Logf("helm rollback to %s: node ready %s after", a.version, time.Since(took).Round(time.Millisecond))
	c.wantRelease(hn, a)
	if got := c.containerdPid(hn); got != pid {
		c.t.Errorf("the rollback restarted containerd (pid %d, was %d)", got, pid)
	}
	if now, _ := os.ReadFile(record); string(now) != string(rec) {
		c.t.Errorf("the rollback changed the install record:\n%s\nwas:\n%s", now, rec)
	}
}

// testHelmMixedShims: after the upgrade the running cryo pod's shim is
// still A's (its binary, replaced on disk, reads deleted), the pods of
// both runtimes tick on, the kubelet's checkpoint of the cryo pod works
// through A's shim and restores under B's, and a new cryo pod runs under
// B's shim.
func testHelmMixedShims(c *k8sCluster, hn helmNode, a helmRel, reg *harness.PrivateRegistry) {
	installed := filepath.Join(hn.host, "usr/local/bin/cryo")
	if exe := c.shimExe(nsApps, "steady"); exe != installed+" (deleted)" {
		c.t.Errorf("the running cryo pod's shim runs %q; want A's replaced binary, %q", exe, installed+" (deleted)")
	}
	c.WaitTicks(nsApps, "steady", 2)
	c.WaitTicks(nsApps, "plain", 2)
	took := time.Now()
	before := harness.LastOf(c.logTicks(nsApps, "steady"))
	archive := c.Checkpoint(nsApps, "steady", "app")
	c.t.Logf("kubelet checkpoint of the cryo pod under A's shim after the upgrade: %s in %s", archive, time.Since(took).Round(time.Millisecond))
	if got := archiveCryoVersion(c.t, archive); got != a.version {
		c.t.Errorf("the checkpoint's manifest says cryo %q wrote it; want A's shim, %s", got, a.version)
	}
	c.WaitTicks(nsApps, "steady", 2)
	testHelmCarriedOver(c, hn, reg, archive, before)
	c.RunPod(appPod(nsApps, "fresh", c.app, podOpts{}))
	c.waitPod(nsApps, "fresh", "Running")
	if exe := c.shimExe(nsApps, "fresh"); exe != installed {
		c.t.Errorf("a new cryo pod's shim runs %q; want B's, %q", exe, installed)
	}
	c.WaitTicks(nsApps, "fresh", 2)
	c.kubectl("delete", "pod", "-n", nsApps, "fresh", "--wait=true", "--timeout=2m")
}

// testHelmCarriedOver: the checkpoint A's shim wrote, as a runnable image,
// restores in a pod under B's shim and carries on from its tick: the way
// to move a running pod onto the new release.
func testHelmCarriedOver(c *k8sCluster, hn helmNode, reg *harness.PrivateRegistry, archive string, before int) {
	tag := reg.Addr + "/ckpt/helm-upgrade:v1"
	builder := harness.NewNode(c.t, nil)
	harness.WantIn(c.t, builder.Cryo(c.t, "image", "build", "--runnable", archive, tag), "built "+tag)
	auth := reg.AuthFile(c.t, c.t.TempDir(), harness.PrivatePassword)
	ref := byDigest(tag, builder.Cryo(c.t, "image", "push", "--authfile", auth, tag))
	c.RunPod(appPod(nsApps, "carried", ref, podOpts{pullSecret: pullSecret}))
	c.waitPod(nsApps, "carried", "Running")
	if exe := c.shimExe(nsApps, "carried"); exe != filepath.Join(hn.host, "usr/local/bin/cryo") {
		c.t.Errorf("the pod restored from A's checkpoint runs under %q; want B's shim", exe)
	}
	c.WaitTicks(nsApps, "carried", 2)
	if first := c.logTicks(nsApps, "carried")[0]; first <= before {
		c.t.Errorf("the restored pod's first tick %d; want one after %d (the checkpoint)", first, before)
	}
	c.t.Log("A's checkpoint restored under B's shim and carried on")
	c.kubectl("delete", "pod", "-n", nsApps, "carried", "--wait=true", "--timeout=2m")
}
