package hook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serveInNetns runs a test HTTP server in a new network namespace (a
// child `unshare -n` holds it) and returns a pid in that namespace: the
// host's loopback does not reach it, only a dial from inside does.
func serveInNetns(t *testing.T, handler http.Handler) (pid, port int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace")
	}
	holder := exec.Command("unshare", "-n", "sleep", "600")
	if err := holder.Start(); err != nil {
		t.Skip("unshare -n:", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	for i := 0; i < 100; i++ {
		a, _ := os.Readlink("/proc/self/ns/net")
		b, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid))
		if b != "" && a != b {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Listen from inside: the same dial helper's trick, on a thread of its own.
	lc := make(chan net.Listener, 1)
	go func() {
		lockedNetns(t, holder.Process.Pid)
		// Bring loopback up: a new namespace has it down.
		if out, err := exec.Command("nsenter", "-t", strconv.Itoa(holder.Process.Pid), "-n", "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Errorf("lo up: %v %s", err, out)
		}
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Error(err)
		}
		lc <- l
	}()
	l := <-lc
	if l == nil {
		t.FailNow()
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return holder.Process.Pid, l.Addr().(*net.TCPAddr).Port
}

func TestRunHTTPInNetns(t *testing.T) {
	var got []string
	mux := http.NewServeMux()
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+string(b)))
		fmt.Fprint(w, "asleep")
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "sleep mode is off: start with --enable-sleep-mode", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(3 * time.Second) })
	pid, port := serveInNetns(t, mux)
	spec := func(path string, timeout time.Duration) Spec {
		s, err := Parse("http:POST " + path + " port=" + strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		s.Timeout = timeout
		return s
	}
	// The host's loopback has no such server: only the namespace's does.
	if c, err := net.DialTimeout("tcp4", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
		c.Close()
		t.Logf("note: port %d is also open on the host's loopback", port)
	}
	a, err := Run(context.Background(), PreCheckpoint, spec("/sleep?level=1", 5*time.Second), pid, nil)
	if err != nil || a.Status != 200 || a.Text != "asleep" || len(got) != 1 || got[0] != "POST /sleep?level=1" {
		t.Fatalf("sleep: %+v %v, server saw %v", a, err, got)
	}
	withBody := spec("/sleep", 5*time.Second)
	withBody.Body = "{}"
	if _, err := Run(context.Background(), PreCheckpoint, withBody, pid, nil); err != nil || len(got) != 2 || got[1] != "POST /sleep {}" {
		t.Fatalf("sleep with a body: %v, server saw %v", err, got)
	}
	_, err = Run(context.Background(), PreCheckpoint, spec("/fail", 5*time.Second), pid, nil)
	var he *Error
	if !errors.As(err, &he) || !errors.Is(err, ErrFailed) || he.Answer == nil || he.Answer.Status != 503 ||
		!strings.Contains(err.Error(), "--enable-sleep-mode") || !strings.Contains(err.Error(), "pre-checkpoint hook") {
		t.Errorf("fail: %v, want ErrFailed with the 503 answer", err)
	}
	start := time.Now()
	_, err = Run(context.Background(), PostRestore, spec("/slow", 300*time.Millisecond), pid, nil)
	if !errors.Is(err, ErrTimeout) || time.Since(start) > 2*time.Second {
		t.Errorf("slow: %v after %s, want ErrTimeout after 300ms", err, time.Since(start))
	}
}

func TestRunExec(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("nsenter needs root")
	}
	self := os.Getpid()
	ok, _ := Parse(`exec:["/bin/sh","-c","echo ran as $(id -u)"]`)
	a, err := Run(context.Background(), PostRestore, ok, self, Nsenter)
	if err != nil || a.Status != 0 || a.Text != "ran as 0" {
		t.Fatalf("exec: %+v %v", a, err)
	}
	bad, _ := Parse(`exec:["/bin/sh","-c","echo no model loaded >&2; exit 3"]`)
	_, err = Run(context.Background(), PreCheckpoint, bad, self, Nsenter)
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "no model loaded") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("failing exec: %v", err)
	}
	slow, _ := Parse("exec:/bin/sleep 30")
	slow.Timeout = 200 * time.Millisecond
	start := time.Now()
	if _, err := Run(context.Background(), PreCheckpoint, slow, self, Nsenter); !errors.Is(err, ErrTimeout) || time.Since(start) > 5*time.Second {
		t.Errorf("slow exec: %v after %s, want ErrTimeout", err, time.Since(start))
	}
	if _, err := Run(context.Background(), PreCheckpoint, ok, self, nil); !errors.Is(err, ErrNoExec) {
		t.Errorf("no exec route: %v, want ErrNoExec", err)
	}
}

// TestNsenterJoinsCgroups: an exec hook of a bare tree runs in the tree's
// cgroups (here a pids cgroup of its own), so their limits bind it.
func TestNsenterJoinsCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a cgroup")
	}
	dir := fmt.Sprintf("/sys/fs/cgroup/pids/cryo-hook-test-%d", os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skip("no cgroup v1 pids hierarchy here:", err)
	}
	target := exec.Command("sleep", "600")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		target.Process.Kill()
		target.Wait()
		for i := 0; i < 50 && os.Remove(dir) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
	if err := os.WriteFile(dir+"/cgroup.procs", []byte(strconv.Itoa(target.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := Parse("exec:/bin/cat /proc/self/cgroup")
	a, err := Run(context.Background(), PreCheckpoint, s, target.Process.Pid, Nsenter)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("pids:/cryo-hook-test-%d", os.Getpid())
	if !strings.Contains(a.Text, want) {
		t.Fatalf("the hook ran in\n%s\nwant %s", a.Text, want)
	}
}
