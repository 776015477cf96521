package shim

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	runcmanager "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/manager"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	"golang.org/x/sys/unix"
)

// manager.go copies the start of containerd's runc shim (its manager's
// Start). These tests run both Starts side by side, each re-executing this
// test binary as a fake server that records what it was given, and compare
// what containerd sees: the socket address, the re-exec's arguments,
// environment, directory and process group, the listening socket on fd 3,
// and the grouping of tasks under one shim. A containerd upgrade that
// changes its Start fails them; each difference listed here is cryo's on
// purpose (see manager.go).

// envFakeServer names the file a re-executed test binary records into.
const envFakeServer = "CRYO_TEST_FAKE_SHIM_SERVER"

func TestMain(m *testing.M) {
	if rec := os.Getenv(envFakeServer); rec != "" && slices.Contains(os.Args, "-namespace") {
		fakeServer(rec)
		return
	}
	os.Exit(m.Run())
}

// started is what a fake server was started with.
type started struct {
	PID, PGID int
	Args, Env []string
	Dir       string
	FD3       string // the path fd 3 is bound to
	Listening bool   // fd 3 is a listening socket
}

// fakeServer records how it was started, then stays (its socket must stay
// connectable, for grouping) until its test process is gone or kills it.
func fakeServer(rec string) {
	s := started{PID: os.Getpid(), Args: os.Args, Env: os.Environ()}
	s.PGID, _ = syscall.Getpgid(0)
	s.Dir, _ = os.Getwd()
	if sa, err := unix.Getsockname(3); err == nil {
		if un, ok := sa.(*unix.SockaddrUnix); ok {
			s.FD3 = un.Name
		}
	}
	acc, err := unix.GetsockoptInt(3, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	s.Listening = err == nil && acc == 1
	data, _ := json.Marshal(s)
	_ = os.WriteFile(rec+".tmp", data, 0o600)
	_ = os.Rename(rec+".tmp", rec)
	parent := os.Getppid()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && os.Getppid() == parent; {
		time.Sleep(50 * time.Millisecond)
	}
	os.Exit(0)
}

// startRun is one Start in a bundle, with the fake server it started.
type startRun struct {
	params shim.BootstrapParams
	server *started // nil: no server was started (a grouped task)
}

// runStart calls start in bundle with containerd at address, and reads
// the record of the server it started, if any.
// A server that is not expected is waited for briefly.
func runStart(t *testing.T, m shim.Manager, bundle, address, id string, wantServer bool) startRun {
	t.Helper()
	rec := filepath.Join(t.TempDir(), "started.json")
	t.Setenv(envFakeServer, rec)
	t.Chdir(bundle)
	null, err := os.Open(os.DevNull) // the runtime options containerd would send: none
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	stdin := os.Stdin
	os.Stdin = null
	defer func() { os.Stdin = stdin }()
	ctx := namespaces.WithNamespace(context.Background(), "drift")
	params, err := m.Start(ctx, id, shim.StartOpts{Address: address})
	if err != nil {
		t.Fatalf("%s Start: %v", m.Name(), err)
	}
	t.Cleanup(func() { _ = shim.RemoveSocket(params.Address) })
	wait := 500 * time.Millisecond
	if wantServer {
		wait = 10 * time.Second
	}
	return startRun{params: params, server: readStarted(t, rec, wait)}
}

// readStarted waits for the fake server's record; nil if none comes.
func readStarted(t *testing.T, rec string, wait time.Duration) *started {
	t.Helper()
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		data, err := os.ReadFile(rec)
		if err != nil {
			continue
		}
		var s started
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopServer(s.PID, "") })
		return &s
	}
	return nil
}

// stopServer kills a fake server, waits until it is gone (its socket
// accepts connections until then, which would group the next task with
// it), and removes its socket.
func stopServer(pid int, address string) {
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil; {
		time.Sleep(10 * time.Millisecond)
	}
	if address != "" {
		_ = shim.RemoveSocket(address)
	}
}

// annotatedBundle writes a config.json with these annotations.
func annotatedBundle(t *testing.T, annotations map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	data, _ := json.Marshal(map[string]any{"annotations": annotations})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the shim's sockets live under containerd's state directory: run as root")
	}
}

// One task, no group: the same socket, the same server command but for
// its name, the same environment but for GOMAXPROCS.
func TestStartMatchesContainerd(t *testing.T) {
	needRoot(t)
	address := filepath.Join(t.TempDir(), "containerd.sock")
	dir := annotatedBundle(t, nil)
	theirs := runStart(t, runcmanager.NewShimManager(RuntimeName), dir, address, "task1", true)
	if theirs.server == nil {
		t.Fatal("containerd's Start started no server")
	}
	stopServer(theirs.server.PID, theirs.params.Address)
	ours := runStart(t, newManager(), dir, address, "task1", true)
	if ours.server == nil {
		t.Fatal("cryo's Start started no server")
	}
	compareParams(t, ours.params, theirs.params)
	compareServers(t, ours.server, theirs.server, dir)
}

// The bootstrap: the same address and protocol. The version is 2, not
// containerd 2.x's 3: containerd 1.7 refuses a shim above 2, and startMain
// prints the plain address, which both read as version 2.
func compareParams(t *testing.T, ours, theirs shim.BootstrapParams) {
	t.Helper()
	if ours.Address != theirs.Address || ours.Protocol != theirs.Protocol {
		t.Errorf("bootstrap: cryo %+v, containerd %+v", ours, theirs)
	}
	if ours.Version != 2 || theirs.Version != 3 {
		t.Errorf("bootstrap versions: cryo %d (want 2), containerd %d (was 3: see startMain)", ours.Version, theirs.Version)
	}
}

func compareServers(t *testing.T, ours, theirs *started, dir string) {
	t.Helper()
	// argv[0] is the shim's name: the multi-call binary dispatches on it,
	// where containerd's re-executes its own path.
	if ours.Args[0] != BinaryName || !slices.Equal(ours.Args[1:], theirs.Args[1:]) {
		t.Errorf("server arguments: cryo %q, containerd %q (after argv[0])", ours.Args, theirs.Args)
	}
	if got, want := added(ours.Env), withoutDeliberate(added(theirs.Env)); !slices.Equal(got, want) {
		t.Errorf("server environment added: cryo %q, containerd %q (without %q)", got, want, deliberateEnv)
	}
	for who, s := range map[string]*started{"cryo": ours, "containerd": theirs} {
		if s.PGID != s.PID {
			t.Errorf("%s's server is not a process group of its own (pgid %d, pid %d)", who, s.PGID, s.PID)
		}
		if real, _ := filepath.EvalSymlinks(dir); s.Dir != dir && s.Dir != real {
			t.Errorf("%s's server runs in %s, not the bundle %s", who, s.Dir, dir)
		}
		if !s.Listening {
			t.Errorf("%s's server has no listening socket on fd 3", who)
		}
	}
	if ours.FD3 != theirs.FD3 {
		t.Errorf("fd 3: cryo %s, containerd %s", ours.FD3, theirs.FD3)
	}
}

// deliberateEnv is what containerd's Start adds and cryo's does not:
// containerd 2.x caps its runc shim at GOMAXPROCS=4. cryo's copy does not
// (the re-layout keeps behaviour); adopting it is a decision of its own,
// since the shim's children (runc, the driver's helpers) inherit it.
var deliberateEnv = []string{"GOMAXPROCS=4"}

func withoutDeliberate(env []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool { return slices.Contains(deliberateEnv, kv) })
}

// added is what a server's environment has beyond this test's.
func added(env []string) []string {
	base := os.Environ()
	var out []string
	for _, kv := range env {
		if !slices.Contains(base, kv) && !strings.HasPrefix(kv, envFakeServer+"=") {
			out = append(out, kv)
		}
	}
	slices.Sort(out)
	return out
}

// Tasks of one group share one shim: the first Start starts the server on
// the group's socket, the next returns its address and starts none. The
// labels containerd knows group the same; cryo's own label groups too.
func TestStartGroupsLikeContainerd(t *testing.T) {
	needRoot(t)
	for _, label := range []string{"io.containerd.runc.v2.group", "io.kubernetes.cri.sandbox-id", "io.containerd.cryo.v2.group"} {
		t.Run(label, func(t *testing.T) {
			address := filepath.Join(t.TempDir(), "containerd.sock")
			dir := annotatedBundle(t, map[string]string{label: "pod1"})
			ours := groupedStart(t, newManager(), dir, address)
			if label == "io.containerd.cryo.v2.group" {
				return // cryo's alone: containerd's runc shim does not know it
			}
			theirs := groupedStart(t, runcmanager.NewShimManager(RuntimeName), dir, address)
			if ours != theirs {
				t.Errorf("group socket: cryo %s, containerd %s", ours, theirs)
			}
		})
	}
}

// groupedStart starts two tasks of one group and returns their socket,
// with the first one's server gone again.
func groupedStart(t *testing.T, m shim.Manager, dir, address string) string {
	first := runStart(t, m, dir, address, "task1", true)
	second := runStart(t, m, dir, address, "task2", false)
	if first.server == nil || second.server != nil || first.params.Address != second.params.Address {
		t.Errorf("%s: grouped tasks: first %+v (server %v), second %+v (server %v)", m.Name(), first.params, first.server != nil, second.params, second.server != nil)
	}
	if first.server != nil {
		stopServer(first.server.PID, first.params.Address)
	}
	return first.params.Address
}
