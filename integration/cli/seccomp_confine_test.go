package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/seccomp"
	ctrdseccomp "github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/confine"
	"github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
)

// TestSeccompConfine: real runc containers, one under containerd's default
// seccomp profile (Kubernetes' RuntimeDefault) and one with no seccomp,
// checkpointed by runc with cryo's CRIU. The filter chains read back from
// each checkpoint's seccomp.img and core images are checked against
// specs: runc's own filter for the default profile passes that profile;
// it is refused by the profile with one more syscall denied (naming it)
// and by the profile without i386; the unconfined container's checkpoint
// is refused by the default profile.
func TestSeccompConfine(t *testing.T) {
	harness.RequireRoot(t)
	dir := t.TempDir()
	confined := seccompConfineCheckpoint(t, dir, "default", true)
	unconfined := seccompConfineCheckpoint(t, dir, "none", false)

	profile := ctrdseccomp.DefaultProfile(confined.spec)
	chains := seccompConfineChains(t, confined.img)
	for task, chain := range chains {
		if len(chain) == 0 {
			t.Fatalf("%s of the confined container has no filter in its checkpoint", task)
		}
		start := time.Now()
		if err := confine.CheckSeccomp(profile, chain); err != nil {
			t.Errorf("%s: runc's filter for the default profile is refused by that profile: %v", task, err)
		}
		t.Logf("%s: %d filter(s) of %d instructions: the default profile accepts them (checked in %s)",
			task, len(chain), len(chain[0])/8, time.Since(start).Round(time.Millisecond))
	}

	// The default profile with getcwd no longer allowed.
	stricter := ctrdseccomp.DefaultProfile(confined.spec)
	removed := false
	for i := range stricter.Syscalls {
		if j := slices.Index(stricter.Syscalls[i].Names, "getcwd"); j >= 0 && stricter.Syscalls[i].Action == specs.ActAllow {
			stricter.Syscalls[i].Names = slices.Delete(slices.Clone(stricter.Syscalls[i].Names), j, j+1)
			removed = true
		}
	}
	if !removed {
		t.Fatal("the default profile does not allow getcwd: pick another syscall")
	}
	noI386 := ctrdseccomp.DefaultProfile(confined.spec)
	noI386.Architectures = slices.DeleteFunc(slices.Clone(noI386.Architectures), func(a specs.Arch) bool { return a == specs.ArchX86 })
	for task, chain := range chains {
		seccompConfineRefused(t, task, confine.CheckSeccomp(stricter, chain), "getcwd", "x86_64")
		seccompConfineRefused(t, task, confine.CheckSeccomp(noI386, chain), "", "x86")
	}

	for task, chain := range seccompConfineChains(t, unconfined.img) {
		if len(chain) != 0 {
			t.Fatalf("%s of the unconfined container has %d filters in its checkpoint", task, len(chain))
		}
		seccompConfineRefused(t, task, confine.CheckSeccomp(profile, chain), "", "x86_64")
	}
}

// seccompConfineRefused fails unless err refuses a weaker chain for
// syscall (any, if empty) on arch.
func seccompConfineRefused(t *testing.T, task string, err error, syscall, arch string) {
	t.Helper()
	var se *confine.SeccompError
	if !errors.Is(err, confine.ErrSeccompWeaker) || !errors.As(err, &se) {
		t.Fatalf("%s: got %v, want a refusal wrapping ErrSeccompWeaker", task, err)
	}
	if se.Arch != arch || syscall != "" && se.Syscall != syscall {
		t.Fatalf("%s: refused %s on %s (%v), want %s on %s", task, se.Syscall, se.Arch, err, syscall, arch)
	}
	t.Logf("%s: %v", task, err)
}

type seccompConfineImage struct {
	img  string
	spec *specs.Spec
}

// seccompConfineCheckpoint runs a busybox container, under the default
// profile or with no seccomp, checks the kernel's view of its seccomp
// mode, and checkpoints it with runc (leaving it stopped).
func seccompConfineCheckpoint(t *testing.T, dir, name string, withProfile bool) seccompConfineImage {
	t.Helper()
	bundle := harness.RwBundle(t, filepath.Join(dir, name))
	path := filepath.Join(bundle, "config.json")
	spec := &specs.Spec{}
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, spec); err != nil {
		t.Fatal(err)
	}
	spec.Process.Args = []string{"/bin/sleep", "1000"}
	spec.Linux.Seccomp = nil
	if withProfile {
		spec.Linux.Seccomp = ctrdseccomp.DefaultProfile(spec)
	}
	if data, err := json.Marshal(spec); err != nil || os.WriteFile(path, data, 0o644) != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	root := filepath.Join(dir, "runc-root")
	id := fmt.Sprintf("cryo-seccomp-%s-%d", name, os.Getpid())
	t.Cleanup(func() { harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id) })
	harness.RwRunDetached(t, nil, "/usr/sbin/runc", "--root", root, "run", "-d", "--bundle", bundle, id)

	want := map[bool]string{true: "2", false: "0"}[withProfile] // SECCOMP_MODE_FILTER, _DISABLED
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", harness.RwInitPID(t, root, id)))
	if err != nil || !strings.Contains(string(status), "\nSeccomp:\t"+want+"\n") {
		t.Fatalf("the container's process should run in seccomp mode %s: %v\n%s", want, err, status)
	}
	img := filepath.Join(dir, name+"-img")
	criuDir := filepath.Dir(harness.PatchedCRIU(t))
	harness.Run(t, time.Minute, []string{"PATH=" + criuDir + ":" + os.Getenv("PATH")},
		"/usr/sbin/runc", "--root", root, "checkpoint", "--image-path", img, "--work-path", img+".work", id)
	return seccompConfineImage{img: img, spec: spec}
}

// seccompConfineChains reads, from a checkpoint's images, the chain CRIU
// would restore for each thread of each process.
func seccompConfineChains(t *testing.T, img string) map[string][][]byte {
	t.Helper()
	var filters []*seccomp.SeccompFilter
	if _, err := os.Stat(filepath.Join(img, "seccomp.img")); err == nil {
		for _, m := range seccompConfineRead(t, img, "seccomp.img", &seccomp.SeccompEntry{}) {
			filters = append(filters, m.(*seccomp.SeccompEntry).GetSeccompFilters()...)
		}
	}
	chains := map[string][][]byte{}
	for _, m := range seccompConfineRead(t, img, "pstree.img", &pstree.PstreeEntry{}) {
		p := m.(*pstree.PstreeEntry)
		threads := p.GetThreads()
		if len(threads) == 0 {
			threads = []uint32{p.GetPid()}
		}
		for _, tid := range threads {
			core := seccompConfineRead(t, img, "core-"+strconv.Itoa(int(tid))+".img", &criucore.CoreEntry{})
			chain, err := confine.SeccompThreadChain(filters, core[0].(*criucore.CoreEntry), tid == p.GetPid())
			if err != nil {
				t.Fatalf("thread %d: %v", tid, err)
			}
			chains[fmt.Sprintf("thread %d of process %d", tid, p.GetPid())] = chain
		}
	}
	if len(chains) == 0 {
		t.Fatalf("%s lists no process", img)
	}
	return chains
}

func seccompConfineRead(t *testing.T, dir, name string, msg proto.Message) []proto.Message {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := crit.New(f, nil, dir, false, true).Decode(msg)
	if err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	if len(img.Entries) == 0 {
		t.Fatalf("%s holds no entry", name)
	}
	var out []proto.Message
	for _, e := range img.Entries {
		out = append(out, e.Message)
	}
	return out
}
