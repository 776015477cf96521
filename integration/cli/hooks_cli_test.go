package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// startHookTree starts fakecuda-app and the hook server in one bare tree
// and returns it with the server's port.
func startHookTree(t *testing.T, env []string) (*harness.BareProc, int) {
	t.Helper()
	port := testsupport.FreePort(t)
	server := filepath.Join(harness.RepoRoot(), "integration", "testdata", "hookserver.py")
	libDir := filepath.Dir(harness.FakeFile(t, "libcuda.so.1"))
	script := `sh -c '` + harness.FakeFile(t, "fakecuda-app") + ` 50 & exec python3 ` + server + ` ` + strconv.Itoa(port) + `' </dev/null`
	p := harness.StartBare(t, append(env, "LD_LIBRARY_PATH="+libDir), nil, script)
	p.WaitTicks(t, 3)
	harness.WaitFor(t, 10*time.Second, "the hook server", func() bool {
		_, err := harness.RunErr(5*time.Second, nil, "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', "+strconv.Itoa(port)+"), 1)")
		return err == nil
	})
	return p, port
}

// hookEvents are the events the hook server recorded.
func hookEvents(p *harness.BareProc) []string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "events"))
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "_"))
}

// noCheckpointIn fails if dir holds a manifest or a CRIU image.
func noCheckpointIn(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() == manifest.ManifestName || strings.HasSuffix(e.Name(), ".img") {
			t.Fatalf("a failed pre-checkpoint hook left %s in %s", e.Name(), dir)
		}
	}
}

func TestHooksCLI(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p, port := startHookTree(t, env)
	hookAt := func(path string) string { return "http:POST " + path + " port=" + strconv.Itoa(port) }
	pid := strconv.Itoa(p.PID)

	t.Run("failing pre-hook leaves the tree untouched", func(t *testing.T) {
		img := filepath.Join(t.TempDir(), "img")
		out := harness.BareCryoFails(t, env, "checkpoint", "--pid", pid, "--dir", img, "--pre-hook", hookAt("/fail"))
		t.Logf("cryo says:\n%s", out)
		harness.WantIn(t, out, "pre-hook", `pre-checkpoint hook "`+hookAt("/fail")+`"`, "503", "--enable-sleep-mode", "checkpoint again", "left running")
		if strings.Contains(out, "suspending CUDA") {
			t.Fatalf("CUDA was suspended before the hook's failure:\n%s", out)
		}
		noCheckpointIn(t, img)
		p.WaitTicks(t, p.LastTick(t)+3)
	})
	t.Run("pre-hook deadline", func(t *testing.T) {
		img := filepath.Join(t.TempDir(), "img")
		start := time.Now()
		out := harness.BareCryoFails(t, env, "checkpoint", "--pid", pid, "--dir", img, "--pre-hook", hookAt("/slow"), "--pre-hook-timeout", "1s")
		if took := time.Since(start); took > 15*time.Second {
			t.Fatalf("a 1s hook deadline took %s", took)
		}
		harness.WantIn(t, out, "timed out after 1s", "longer deadline")
		noCheckpointIn(t, img)
		p.WaitTicks(t, p.LastTick(t)+3)
		// The server still holds the abandoned request's connection until
		// its handler returns, and CRIU refuses a connected socket.
		time.Sleep(3 * time.Second)
	})

	t.Run("a failed checkpoint wakes the server", func(t *testing.T) {
		faults := t.TempDir()
		if err := os.WriteFile(filepath.Join(faults, "checkpoint"), []byte("error 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		img := filepath.Join(t.TempDir(), "img")
		out := harness.BareCryoFails(t, harness.FakeDriverEnv(t, faults), "checkpoint", "--pid", pid, "--dir", img,
			"--pre-hook", hookAt("/sleep"), "--post-hook", hookAt("/wake"))
		harness.WantIn(t, out, "failed at step suspend", "left running")
		ev := hookEvents(p)
		if len(ev) != 2 {
			t.Fatalf("events %v, want sleep then wake", ev)
		}
		if slept, woke := harness.EventTick(t, ev[0], "sleep"), harness.EventTick(t, ev[1], "wake"); woke <= slept {
			t.Fatalf("woke after tick %d, slept after %d", woke, slept)
		}
		if err := os.Remove(filepath.Join(p.Dir, "events")); err != nil {
			t.Fatal(err)
		}
	})

	img := filepath.Join(t.TempDir(), "img")
	out := harness.BareCryo(t, env, "checkpoint", "--pid", pid, "--dir", img, "--pre-hook", hookAt("/sleep?level=1"))
	hook, suspend := strings.Index(out, "running the pre-checkpoint hook"), strings.Index(out, "suspending CUDA")
	if hook < 0 || suspend < 0 || hook > suspend {
		t.Fatalf("the pre-checkpoint hook must come before the suspend:\n%s", out)
	}
	harness.WaitFor(t, 10*time.Second, "the dumped tree to exit", func() bool { return !p.Alive() })
	m, err := manifest.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	if names := stepNames(m.Steps); !strings.HasPrefix(strings.Join(names, " "), "pre-hook find inventory suspend") {
		t.Fatalf("manifest steps %v, want pre-hook first, before find and suspend", names)
	}
	ev := hookEvents(p)
	if len(ev) != 1 {
		t.Fatalf("events %v, want one sleep", ev)
	}
	slept := harness.EventTick(t, ev[0], "sleep")

	start := time.Now()
	out = harness.Run(t, harness.BareTimeout, env, harness.CryoBin(t, "cryo"), "restore", "--dir", img, "--post-hook", hookAt("/wake"))
	t.Logf("restore with its post-restore hook: %s", time.Since(start))
	resume, post := strings.Index(out, "resuming CUDA done"), strings.Index(out, "running the post-restore hook")
	if resume < 0 || post < 0 || post < resume {
		t.Fatalf("the post-restore hook must come after the CUDA resume:\n%s", out)
	}
	ev = hookEvents(p)
	if len(ev) != 2 {
		t.Fatalf("events %v, want sleep then wake", ev)
	}
	if woke := harness.EventTick(t, ev[1], "wake"); woke <= slept {
		t.Fatalf("woke after tick %d, slept after %d: the app did not run on from its state", woke, slept)
	}
	p.WaitTicks(t, p.LastTick(t)+3)
	bareTicksIncrease(t, p.Output())

	// A failed post-restore hook: the tree runs on, restored, and cryo
	// says so, with the hook's answer, and exits non-zero.
	img2 := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", pid, "--dir", img2)
	harness.WaitFor(t, 10*time.Second, "the dumped tree to exit", func() bool { return !p.Alive() })
	out = harness.BareCryoFails(t, env, "restore", "--dir", img2, "--post-hook", hookAt("/fail"))
	t.Logf("cryo says:\n%s", out)
	harness.WantIn(t, out, "post-hook", `post-restore hook "`+hookAt("/fail")+`"`, "503", "the restored processes run", pid)
	if !p.Alive() {
		t.Fatalf("a failed post-restore hook ended the restored tree:\n%s", out)
	}
	p.WaitTicks(t, p.LastTick(t)+3)
}

func stepNames(steps []manifest.Step) []string {
	var names []string
	for _, s := range steps {
		names = append(names, s.Name)
	}
	return names
}
