package ociimage

import (
	"context"
	"crypto/rand"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

func TestBuildAndUnpackProgress(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	src, err := OpenSource(fakeCheckpoint(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var out testsupport.Buffer
	r := progress.New(&out, false)
	if _, _, err := Build(ctx, st, src, BuildOptions{Ref: "example/ckpt:1", SplitAt: 2 << 20, Progress: r}); err != nil {
		t.Fatal(err)
	}
	// 3 MiB and 9 bytes of files, and the tar's headers.
	if s := out.String(); !strings.Contains(s, "build example/ckpt:1… 3.0 MiB\n") || !strings.Contains(s, "build example/ckpt:1 done in ") || !strings.Contains(s, " (3.0 MiB, ") ||
		strings.Count(s, "build example/ckpt:1: layer ") != 2 {
		t.Fatalf("build progress:\n%s", s)
	}
	out.Reset()
	if _, err := st.UnpackWith(ctx, "example/ckpt:1", filepath.Join(t.TempDir(), "out"), UnpackOptions{Progress: r}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "unpack example/ckpt:1 done in ") || strings.Contains(s, "\r") {
		t.Fatalf("unpack progress:\n%s", s)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	out.Reset()
	if _, _, err := Build(canceled, st, src, BuildOptions{Ref: "example/ckpt:2", Progress: r}); err == nil {
		t.Fatal("a canceled build succeeded")
	}
	if s := out.String(); !strings.Contains(s, "build example/ckpt:2 interrupted after") || strings.Contains(s, "build example/ckpt:2 done") {
		t.Fatalf("canceled build:\n%s", s)
	}
}

// registry is Debian's docker-registry on loopback, reached through a proxy
// that slows uploads down (so that a test can act while a push runs) and
// counts the bytes it forwards.
type registry struct {
	t       *testing.T
	server  *testsupport.Registry
	addr    string // the registry's own address
	proxy   net.Listener
	up      atomic.Int64 // bytes forwarded to the registry
	slow    atomic.Bool
	stopped atomic.Bool
}

func startRegistry(t *testing.T) *registry {
	if _, err := exec.LookPath("docker-registry"); err != nil {
		t.Skip("docker-registry is not installed (make deps installs it): the push and pull tests need a real registry")
	}
	r := &registry{t: t, server: testsupport.StartRegistry(t, "")}
	r.addr = r.server.Addr
	var err error
	if r.proxy, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	go r.serve()
	return r
}

// stop kills the registry and the proxy: the registry goes away mid-push.
func (r *registry) stop() {
	if r.stopped.Swap(true) {
		return
	}
	r.server.Stop()
	if r.proxy != nil {
		r.proxy.Close()
	}
}

func (r *registry) serve() {
	for {
		c, err := r.proxy.Accept()
		if err != nil {
			return
		}
		go r.forward(c)
	}
}

func (r *registry) forward(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", r.addr)
	if err != nil {
		return
	}
	defer s.Close()
	go func() {
		io.Copy(c, s)
		c.Close() // the registry went away: so does the client's connection
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
			r.up.Add(int64(n))
		}
		if err != nil {
			return
		}
		if r.slow.Load() {
			time.Sleep(10 * time.Millisecond) // about 6 MiB/s
		}
	}
}

// ref names an image on the registry, through the proxy.
func (r *registry) ref(name string) string { return r.proxy.Addr().String() + "/cryo/" + name }

// bigImage builds an image whose pages layer takes seconds through the
// slow proxy; it returns the pages, for an image that shares them.
func bigImage(t *testing.T, st *Store, ref string) []byte {
	pages := make([]byte, 24<<20)
	rand.Read(pages)
	imageOf(t, st, ref, "inventory", pages)
	return pages
}

func imageOf(t *testing.T, st *Store, ref, inventory string, pages []byte) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte(inventory), 0o600)
	os.WriteFile(filepath.Join(dir, "pages-1.img"), pages, 0o600)
	sealCheckpoint(t, dir)
	src, err := OpenSource(dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, _, err := Build(context.Background(), st, src, BuildOptions{Ref: ref, SplitAt: 1 << 20}); err != nil {
		t.Fatal(err)
	}
}

func newStore(t *testing.T) *Store {
	st, err := OpenStore(context.Background(), filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPushPullProgress: a push reports its bytes and ends "done"; the
// second push of the same image ends "skipped: already exists"; an image
// that shares its pages with one pushed before names that layer "skipped:
// already exists" and moves only the rest. The same holds for pulls.
func TestPushPullProgress(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t)
	st := newStore(t)
	ref := reg.ref("app:1")
	pages := bigImage(t, st, ref)
	var out testsupport.Buffer
	o := TransferOptions{RemoteOptions: RemoteOptions{PlainHTTP: true}, Renderer: progress.New(&out, false)}

	if _, err := st.Push(ctx, ref, o); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "push "+ref+"… 24.0 MiB\n") || !strings.Contains(s, "push "+ref+" done in ") || !strings.Contains(s, " (24.0 MiB, ") {
		t.Fatalf("first push:\n%s", s)
	}
	out.Reset()
	if _, err := st.Push(ctx, ref, o); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.HasSuffix(s, "push "+ref+" skipped: already exists\n") || strings.Contains(s, "done") {
		t.Fatalf("second push, want the image skipped:\n%s", s)
	}
	ref2 := reg.ref("app:2")
	imageOf(t, st, ref2, "another inventory", pages)
	out.Reset()
	if _, err := st.Push(ctx, ref2, o); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Count(s, "(24.0 MiB) skipped: already exists\n") != 1 || !strings.Contains(s, "push "+ref2+" done in ") || strings.Contains(s, "(24.0 MiB, ") {
		t.Fatalf("push of an image sharing the pages, want the pages layer skipped:\n%s", s)
	}

	other := newStore(t)
	out.Reset()
	if _, err := other.Pull(ctx, ref, o); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "pull "+ref+" done in ") || !strings.Contains(s, " (24.0 MiB, ") {
		t.Fatalf("pull:\n%s", s)
	}
	out.Reset()
	if _, err := other.Pull(ctx, ref, o); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.HasSuffix(s, "pull "+ref+" skipped: already exists\n") {
		t.Fatalf("second pull:\n%s", s)
	}
}

// waitUploading waits until the push has sent some of its pages.
func waitUploading(t *testing.T, reg *registry) {
	for deadline := time.Now().Add(30 * time.Second); reg.up.Load() < 2<<20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the push sent nothing to the registry")
		}
	}
}

// TestPushRegistryStoppedFails: a registry that goes away mid-push ends
// the line "failed", after the retry says so; never "done".
func TestPushRegistryStoppedFails(t *testing.T) {
	reg := startRegistry(t)
	st := newStore(t)
	ref := reg.ref("app:1")
	bigImage(t, st, ref)
	reg.slow.Store(true)
	var out testsupport.Buffer
	o := TransferOptions{RemoteOptions: RemoteOptions{PlainHTTP: true}, Renderer: progress.New(&out, false), Attempts: 2}
	go func() { waitUploading(t, reg); reg.stop() }()
	if _, err := st.Push(context.Background(), ref, o); err == nil {
		t.Fatal("a push to a stopped registry succeeded")
	}
	s := out.String()
	if !strings.Contains(s, "push "+ref+": attempt 1 failed") || !strings.Contains(s, "push "+ref+" failed after ") || strings.Contains(s, "done") {
		t.Fatalf("push to a stopped registry:\n%s", s)
	}
	t.Logf("progress of a push to a registry stopped mid-way:\n%s", s)
}

// TestPushCanceledIsInterrupted: a push whose context is canceled mid-way
// (the user's ^C) ends the line "interrupted", on a terminal too.
func TestPushCanceledIsInterrupted(t *testing.T) {
	reg := startRegistry(t)
	st := newStore(t)
	ref := reg.ref("app:1")
	bigImage(t, st, ref)
	reg.slow.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testsupport.Buffer
	o := TransferOptions{RemoteOptions: RemoteOptions{PlainHTTP: true}, Renderer: progress.New(&out, true)}
	go func() { waitUploading(t, reg); cancel() }()
	if _, err := st.Push(ctx, ref, o); err == nil {
		t.Fatal("a canceled push succeeded")
	}
	s := out.String()
	if !strings.Contains(s, "\r\x1b[Kpush "+ref+" interrupted after ") || strings.Contains(s, "done") || strings.Count(s, "\n") != 1 {
		t.Fatalf("canceled push:\n%q", s)
	}
}
