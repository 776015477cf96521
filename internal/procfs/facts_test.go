package procfs

import (
	"os"
	"strconv"
	"testing"
)

// This test's own process: its cgroups, status fields and environment.
func TestOwnFacts(t *testing.T) {
	cgs, err := Cgroups(os.Getpid())
	if err != nil || len(cgs) == 0 {
		t.Fatalf("Cgroups: %v, %v", cgs, err)
	}
	for _, cg := range cgs {
		if cg.ID == "" || cg.Path == "" {
			t.Errorf("a cgroup line without hierarchy or path: %+v", cg)
		}
	}
	if v, ok := StatusField(os.Getpid(), "TracerPid"); !ok || v == "" {
		t.Errorf("TracerPid: %q %v", v, ok)
	}
	if _, ok := StatusField(os.Getpid(), "NoSuchField"); ok {
		t.Error("a field status does not have")
	}
	if n := NSPID(os.Getpid()); n <= 0 {
		t.Errorf("NSPID %d", n)
	}
	if n := NSPID(-1); n != -1 {
		t.Errorf("NSPID of no process: %d, want the pid itself", n)
	}
	t.Setenv("CRYO_PROCFS_TEST", "x") // set after start: not in environ
	env, err := Environ(os.Getpid())
	if err != nil || env["PATH"] != os.Getenv("PATH") || env["CRYO_PROCFS_TEST"] != "" {
		t.Errorf("Environ: PATH %q, %v", env["PATH"], err)
	}
	if _, err := Environ(-1); err == nil {
		t.Error("the environment of no process")
	}
}

// A file this process holds open is among its descriptors, with its path.
func TestFDs(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fds, err := FDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(int(f.Fd()))
	for _, fd := range fds {
		if fd.Num == want {
			if fd.Target != f.Name() || fd.Path != "/proc/"+strconv.Itoa(os.Getpid())+"/fd/"+want {
				t.Fatalf("fd %s: %+v, want %s", want, fd, f.Name())
			}
			return
		}
	}
	t.Fatalf("fd %s missing from %+v", want, fds)
}
