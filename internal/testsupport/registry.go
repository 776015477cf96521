package testsupport

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Registry is a docker-registry serving on loopback from a temporary
// directory.
type Registry struct {
	Addr    string // host:port, plain HTTP
	Storage string // its storage root (docker/registry/v2/… below it)

	cmd  *exec.Cmd
	log  *os.File
	once sync.Once
}

// StartRegistry starts a registry with extra configuration (YAML, top
// level; "" for none) and waits until it listens. It fails the test
// without docker-registry on PATH; a test that may run without it checks
// exec.LookPath("docker-registry") first. The registry is stopped when the
// test ends; its log is registry.log beside the storage.
func StartRegistry(t testing.TB, extra string) *Registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("docker-registry missing: run `make deps`")
	}
	dir := t.TempDir()
	r := &Registry{Addr: FreeAddr(t), Storage: filepath.Join(dir, "storage")}
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n%s", r.Storage, r.Addr, extra)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.log, _ = os.Create(filepath.Join(dir, "registry.log"))
	r.cmd = exec.Command(bin, "serve", cfgPath)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", r.Addr); err == nil {
			c.Close()
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not listen on %s", r.Addr)
		}
	}
}

// Stop kills the registry (a test may stop it early: a registry that goes
// away mid-transfer); later calls do nothing.
func (r *Registry) Stop() {
	r.once.Do(func() {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		if r.log != nil {
			r.log.Close()
		}
	})
}
