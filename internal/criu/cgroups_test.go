package criu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
