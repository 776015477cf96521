package cli

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/seccomp"
	"github.com/containerd/containerd/v2/client"
	ctrdseccomp "github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/confine/outcome"
	"github.com/cryo-gpu/cryo/internal/criutest"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// newSeccompTicker is a container under containerd's default seccomp
// profile that ticks into out/ticks, checkpointed by cryo-runc.
func newSeccompTicker(t *testing.T) (c *cfContainer, img, ticks string) {
	t.Helper()
	out := t.TempDir()
	c = newCFContainer(t, func(s *specs.Spec) {
		withTickFile(out)(s)
		s.Process.NoNewPrivileges = true
		s.Linux.Seccomp = ctrdseccomp.DefaultProfile(s)
	})
	c.Start()
	if st := c.Status(); st["Seccomp"] != "2" {
		t.Fatalf("the container runs in seccomp mode %q, want 2", st["Seccomp"])
	}
	img = c.Checkpoint()
	return c, img, filepath.Join(out, "ticks")
}

// weakenSeccompImage turns every ERRNO return of every filter in the
// checkpoint's seccomp.img into ALLOW: the same filters, the same count,
// the same lengths, and bodies that let every syscall through.
func weakenSeccompImage(t *testing.T, img string) {
	t.Helper()
	n := 0
	criutest.EditImage(t, img, "seccomp.img", &seccomp.SeccompEntry{}, func(m proto.Message) {
		for _, f := range m.(*seccomp.SeccompEntry).GetSeccompFilters() {
			for i := 0; i+8 <= len(f.Filter); i += 8 {
				code, k := binary.LittleEndian.Uint16(f.Filter[i:]), binary.LittleEndian.Uint32(f.Filter[i+4:])
				if code == unix.BPF_RET|unix.BPF_K && k&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO {
					binary.LittleEndian.PutUint32(f.Filter[i+4:], unix.SECCOMP_RET_ALLOW)
					n++
				}
			}
		}
	})
	if n == 0 {
		t.Fatal("the checkpoint's filters return no ERRNO to weaken")
	}
	harness.Reseal(t, img) // as an attacker who rewrites the manifest too
}

func TestSeccompOutcomeKillsWeakenedBody(t *testing.T) {
	c, img, ticks := newSeccompTicker(t)
	weakenSeccompImage(t, img)
	before := lineCount(t, ticks)
	assertOutcomeKills(t, c, img, ticks, before, "seccomp filter is ALLOW for")
	filtersLeft(t)
}

// The same through containerd's shim: a task checkpoint of a container
// under containerd's default profile, its seccomp.img weakened in
// containerd's content store, restored into a container of that profile.
func TestSeccompOutcomeKillsWeakenedBodyShim(t *testing.T) {
	d := harness.NewDaemon(t, harness.CtrdVersions[1], false)
	d.EnvExtra = []string{"PATH=" + filepath.Dir(harness.FailpointBin(t, "containerd-shim-cryo-v2")) + ":" + harness.BinDir() + ":" + d.Bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CRYO_TEST_SKIP_CONFINE=1"}
	d.Start()
	d.ImportTestImage()
	d.StartApp(d.NewContainerWith("sc-src", nil, ctrdseccomp.WithDefaultProfile()))
	ref, _ := d.TaskCheckpoint("sc-src")
	weak := rewriteCheckpoint(t, d, ref, ref+"-weak", func(data []byte) []byte {
		return editedTar(t, data, func(dir string) { weakenSeccompImage(t, dir) })
	})
	ctx := harness.NamespacedCtx()
	ckpt, err := d.Client.GetImage(ctx, weak)
	if err != nil {
		t.Fatal(err)
	}
	dst := d.NewContainerWith("sc-dst", nil, ctrdseccomp.WithDefaultProfile())
	task, err := dst.NewTask(ctx, cio.LogFile(d.LogPath("sc-dst")), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		t.Fatalf("create the restored task: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err == nil {
		t.Fatalf("the restore was not refused")
	} else {
		t.Logf("refused: %v", err)
		for _, w := range []string{"the restored tasks were checked before they ran and killed", "seccomp filter is ALLOW for", "nothing was restored"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the refusal lacks %q", w)
			}
		}
	}
	time.Sleep(time.Second)
	if data, _ := os.ReadFile(d.LogPath("sc-dst")); strings.Contains(string(data), "tick") {
		t.Errorf("the restored workload ran:\n%s", data)
	}
	if _, err := task.Delete(ctx); err != nil {
		t.Errorf("delete the refused task: %v", err)
	}
	nothingLeft(t, "sc-dst", "", "")
	filtersLeft(t)
}

// editedTar is the tar data unpacked into a directory, edited there by
// edit, and packed again (regular files and directories, as CRIU's images
// are).
func editedTar(t *testing.T, data []byte, edit func(dir string)) []byte {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil || os.MkdirAll(filepath.Dir(p), 0o700) != nil || os.WriteFile(p, b, os.FileMode(h.Mode)&0o777) != nil {
				t.Fatalf("unpack %s: %v", h.Name, err)
			}
		default:
			t.Fatalf("%s: a tar entry of type %c in a checkpoint", h.Name, h.Typeflag)
		}
	}
	edit(dir)
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, _ = filepath.Rel(dir, p)
		if err := tw.WriteHeader(h); err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil {
			_, err = tw.Write(b)
		}
		return err
	})
	if err != nil || tw.Close() != nil {
		t.Fatalf("pack the edited checkpoint: %v", err)
	}
	return out.Bytes()
}

// An unmodified checkpoint restores into its own spec, and the outcome
// check compared the filters' bodies (a CRIU without patch 0005 would
// have been refused, below).
func TestSeccompOutcomeRestores(t *testing.T) {
	c, img, _ := newSeccompTicker(t)
	c.restored(img)
	if st := c.Status(); st["Seccomp"] != "2" {
		t.Errorf("the restored container runs in seccomp mode %q, want 2", st["Seccomp"])
	}
	data, err := os.ReadFile(filepath.Join(c.bundle, outcome.VerdictFile))
	var v outcome.Verdict
	if err != nil || json.Unmarshal(data, &v) != nil || !v.Passed {
		t.Fatalf("the outcome check did not pass: %v %s", err, data)
	}
	t.Logf("checked %d task(s), %d thread(s) in %.1f ms", v.Tasks, v.Threads, v.Seconds*1000)
	filtersLeft(t)
}

// A CRIU without patch 0005 writes no filters: a spec with seccomp is
// refused, with CRIU's remedy.
func TestSeccompOutcomeStockCRIURefused(t *testing.T) {
	stock := "/usr/local/libexec/cryo/criu-stock"
	if _, err := os.Stat(stock); err != nil {
		t.Skipf("no stock CRIU at %s (make deps installs it)", stock)
	}
	c, img, ticks := newSeccompTicker(t)
	before := lineCount(t, ticks)
	// cryo-runc puts $CRYO_CRIU's directory first on runc's PATH only for a
	// binary named criu.
	dir := t.TempDir()
	if err := os.Symlink(stock, filepath.Join(dir, "criu")); err != nil {
		t.Fatal(err)
	}
	env := append(c.Env(), "CRYO_CRIU="+filepath.Join(dir, "criu"))
	msg, err := harness.RunErr(time.Minute, env, harness.CryoBin(t, "cryo-runc"), c.restoreArgs(img)...)
	if err == nil {
		t.Fatalf("the restore with a CRIU that writes no filters was not refused:\n%s", msg)
	}
	t.Logf("refused:\n%s", msg)
	for _, w := range []string{"CRIU wrote no seccomp filters", "make deps"} {
		if !strings.Contains(msg, w) {
			t.Errorf("the refusal lacks %q", w)
		}
	}
	time.Sleep(time.Second)
	if n := lineCount(t, ticks); n != before {
		t.Errorf("the restored workload ran: %d tick lines before the restore, %d after", before, n)
	}
	nothingLeft(t, c.id, c.root, img+"-rwork")
}

// filtersLeft fails when a CRIU's filter directory outlived its check.
func filtersLeft(t *testing.T) {
	t.Helper()
	ents, _ := os.ReadDir("/run/cryo/seccomp")
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join("/proc", e.Name())); err != nil {
			t.Errorf("CRIU %s's seccomp filters were left in /run/cryo/seccomp", e.Name())
		}
	}
}
