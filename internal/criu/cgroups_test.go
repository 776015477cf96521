package criu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/bundle"
)

// A spec without a cgroup namespace restores with manage-cgroups=ignore for
// that restore only; lines the configuration had before stay after it.
func TestConfineCgroupsIgnore(t *testing.T) {
	defer func(old string) { runcConf = old }(runcConf)
	runcConf = filepath.Join(t.TempDir(), "none.conf")
	b := bundleWith(t, `{"ociVersion":"1.0.2","linux":{"namespaces":[{"type":"pid"},{"type":"mount"}]}}`)
	if _, err := AddConfig(b, TCPEstablished); err != nil {
		t.Fatal(err)
	}
	undo, lines, err := ConfineCgroups(b)
	if err != nil || len(lines) != 1 || lines[0] != ManageCgroupsIgnore {
		t.Fatalf("lines %q, err %v", lines, err)
	}
	if got := confLines(t, b); got != "tcp-established|manage-cgroups=ignore" {
		t.Fatalf("during the restore: %q", got)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if got := confLines(t, b); got != "tcp-established" {
		t.Fatalf("after the restore: %q", got)
	}
}

// A spec with a cgroup namespace keeps CRIU's default mode: ignore would
// bring the tasks back in the host's cgroup namespace.
func TestConfineCgroupsNamespace(t *testing.T) {
	defer func(old string) { unifiedRoot = old }(unifiedRoot)
	unifiedRoot = t.TempDir() // a v1 hybrid: runc names CRIU every root
	b := bundleWith(t, `{"ociVersion":"1.0.2","linux":{"namespaces":[{"type":"cgroup"}]}}`)
	undo, lines, err := ConfineCgroups(b)
	if err != nil || lines != nil {
		t.Fatalf("lines %q, err %v", lines, err)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b, ConfName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a configuration was written: %v", err)
	}
}

// On a host of cgroup v2 alone runc 1.1 names CRIU no cgroup root: a spec
// with a cgroup namespace gets the container's own cgroup as CRIU's root,
// from its cgroupfs or systemd cgroupsPath.
func TestConfineCgroupsNamespaceUnified(t *testing.T) {
	defer func(old string) { unifiedRoot = old }(unifiedRoot)
	unifiedRoot = t.TempDir()
	if err := os.WriteFile(filepath.Join(unifiedRoot, "cgroup.controllers"), []byte("memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/kubepods/besteffort/pod1/abc":                     "cgroup-root=/kubepods/besteffort/pod1/abc",
		"kubepods-besteffort-pod1.slice:cri-containerd:abc": "cgroup-root=/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-abc.scope",
		":cryo:x":       "cgroup-root=/system.slice/cryo-x.scope",
		"relative/path": "",
	} {
		b := bundleWith(t, `{"ociVersion":"1.0.2","linux":{"cgroupsPath":"`+path+`","namespaces":[{"type":"cgroup"}]}}`)
		lines, err := CgroupLines(b)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(lines) == 1 {
			got = lines[0]
		}
		if got != want || len(lines) > 1 {
			t.Errorf("cgroupsPath %q: lines %q, want %q", path, lines, want)
		}
	}
}

// A container with a CRIU configuration of its own is left alone, and said so.
func TestConfineCgroupsForeign(t *testing.T) {
	b := bundleWith(t, `{"ociVersion":"1.0.2","annotations":{"org.criu.config":"/etc/mine.conf"}}`)
	undo, lines, err := ConfineCgroups(b)
	if !errors.Is(err, ErrForeignConfig) || lines != nil {
		t.Fatalf("lines %q, err %v", lines, err)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
}

// A container that names a CRIU configuration of its own keeps its lines
// through a restore that adds cryo's: they come first in cryo's file, and
// afterwards the annotation names the container's own file again and
// cryo's file holds its lines alone.
func TestAdoptForeign(t *testing.T) {
	own := filepath.Join(t.TempDir(), "mine.conf")
	if err := os.WriteFile(own, []byte("log-file=mine.log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := bundleWith(t, `{"ociVersion":"1.0.2","annotations":{"org.criu.config":"`+own+`"}}`)
	undo, err := AdoptForeign(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AddConfig(b, "action-script /x.sh"); err != nil {
		t.Fatalf("after adopting: %v", err)
	}
	if got := confLines(t, b); got != "log-file=mine.log|action-script /x.sh" {
		t.Fatalf("during the restore: %q", got)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if got := confLines(t, b); got != "log-file=mine.log" {
		t.Fatalf("after the restore: %q", got)
	}
	spec, err := bundle.ReadRaw(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := spec.Annotation(ConfigAnnotation); got != own {
		t.Fatalf("annotation after the restore: %q, want %q", got, own)
	}
	if data, _ := os.ReadFile(own); string(data) != "log-file=mine.log\n" {
		t.Fatalf("the container's own file changed: %q", data)
	}
}
