package harness

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// rwFakeRuncScript stands in for runc: it records every command line (one
// line per call, arguments separated by \x1f) in $FAKE_RUNC_LOG, answers
// `state` and `ps` for the container pid $FAKE_RUNC_PID, writes a CRIU
// inventory on `checkpoint`, and exits with $FAKE_RUNC_EXIT.
const rwFakeRuncScript = `#!/bin/sh
{ for a in "$@"; do printf '%s\037' "$a"; done; echo; } >> "$FAKE_RUNC_LOG"
prev=
for a in "$@"; do
	case "$a" in
	state) echo '{"status":"running"}'; exit 0 ;;
	ps) echo "[$FAKE_RUNC_PID]"; exit 0 ;;
	esac
	[ "$prev" = --image-path ] && mkdir -p "$a" && echo inv > "$a/inventory.img"
	prev=$a
done
echo "fake runc says hello"
exit "${FAKE_RUNC_EXIT:-0}"
`

// RwFakeRunc writes the script and returns the environment that makes
// cryo-runc use it, and a function reading the recorded command lines.
func RwFakeRunc(t *testing.T, exit int) ([]string, func() [][]string) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "runc")
	if err := os.WriteFile(script, []byte(rwFakeRuncScript), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "calls")
	env := []string{"CRYO_RUNC=" + script, "FAKE_RUNC_LOG=" + log, "FAKE_RUNC_EXIT=" + strconv.Itoa(exit), "CRYO_RUNC_ENV=/dev/null"}
	return env, func() [][]string {
		data, _ := os.ReadFile(log)
		var calls [][]string
		for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			if line != "" {
				calls = append(calls, strings.Split(strings.TrimSuffix(line, "\x1f"), "\x1f"))
			}
		}
		return calls
	}
}

// RwCraftCheckpoint writes a CRIU-looking image directory whose manifest says
// one CUDA process ran on an H100 holding 8 GiB, with good digests.
func RwCraftCheckpoint(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "checkpoint")
	os.MkdirAll(dir, 0o755)
	for name, data := range map[string]string{"inventory.img": "inventory", "pages-1.img": strings.Repeat("page", 1024), "files.img": "libcuda.so.1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := manifest.New("crafted")
	m.Processes = []manifest.Process{{PID: 1, State: "running"}}
	m.Inventory = cuda.Inventory{DriverVersion: "580.159.04", CUDAVersion: 13000, GPUs: []cuda.GPU{{
		Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-0b1c2d3e-0000-4000-8000-000000000001",
		MemoryTotal: 80 << 30, MemoryFree: 72 << 30, ComputeCapability: "9.0"}}}
	// The needs of a manifest before version 3: every GPU, with the memory in use on it.
	m.Needs = []manifest.GPUNeed{{UUID: "GPU-0b1c2d3e-0000-4000-8000-000000000001", Name: "NVIDIA H100 80GB HBM3", ComputeCapability: "9.0", Memory: 8 << 30}}
	var err error
	if m.Digests, err = digest.Files(dir); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir
}

// RwBundle writes an OCI bundle running fakecuda-app (runc spec, edited),
// given GPU 0's stand-in node (GiveStandIns).
func RwBundle(t *testing.T, dir string) string {
	t.Helper()
	NewRootfs(t, dir)
	Run(t, 10*time.Second, nil, "/usr/sbin/runc", "spec", "--bundle", dir)
	path := filepath.Join(dir, "config.json")
	data, _ := os.ReadFile(path)
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Process.Terminal = false
	spec.Process.Args = []string{"/bin/fakecuda-app", "100"}
	GiveStandIns(&spec, 0)
	data, _ = json.Marshal(&spec)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// RwRunDetached runs a runc-like command whose container writes to a fresh
// pipe (CRIU can dump pipes, not host files), returning what the container
// prints.
func RwRunDetached(t *testing.T, env []string, name string, args ...string) *testsupport.Buffer {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, w, w
	out := &testsupport.Buffer{}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			out.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	err = cmd.Run()
	w.Close()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return out
}

func RwLastTick(s string) int {
	n := -1
	for _, m := range regexp.MustCompile(`tick (\d+) state=running sum=OK`).FindAllStringSubmatch(s, -1) {
		n, _ = strconv.Atoi(m[1])
	}
	return n
}

// RwRun is fakecuda-app in a container run by cryo-runc (RwStart).
type RwRun struct {
	Dir, Bundle, EnvFile, Root, ID string
	Out                            *testsupport.Buffer
}

// RwStart runs fakecuda-app in a container through cryo-runc, whose
// environment file has the real runc, the fake driver and lines, and waits
// for its first ticks. The container is deleted at the end of the test.
func RwStart(t *testing.T, name string, lines ...string) RwRun {
	t.Helper()
	r := RwRun{Dir: t.TempDir(), ID: name + "-" + strconv.Itoa(os.Getpid())}
	r.Bundle = RwBundle(t, filepath.Join(r.Dir, "bundle"))
	r.EnvFile, r.Root = filepath.Join(r.Dir, "cryo-runc.env"), filepath.Join(r.Dir, "runc-root")
	all := append(append([]string{"CRYO_RUNC=/usr/sbin/runc"}, lines...), FakeDriverEnv(t, "")...)
	if err := os.WriteFile(r.EnvFile, []byte(strings.Join(all, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", r.Root, "delete", "-f", r.ID) })
	r.Out = RwRunDetached(t, nil, CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "run", "-d", "--bundle", r.Bundle, r.ID)
	WaitFor(t, 20*time.Second, "the app to tick", func() bool { return RwLastTick(r.Out.String()) >= 3 })
	return r
}
