package criu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func bundleWith(t *testing.T, spec string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func confLines(t *testing.T, bundle string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bundle, ConfName))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(strings.TrimSpace(string(data)), "\n", "|")
}

// Lines merge into one file, each once; the file starts from runc's default
// configuration, which the annotation replaces; the rest of the spec is
// kept as it was; a line taken out again is gone.
func TestAddCRIUConfig(t *testing.T) {
	hostConf := filepath.Join(t.TempDir(), "runc.conf")
	os.WriteFile(hostConf, []byte("skip-in-flight\n\n"), 0o644)
	defer func(old string) { runcConf = old }(runcConf)
	runcConf = hostConf

	b := bundleWith(t, `{"ociVersion":"1.0.2","process":{"user":{"uid":0},"oomScoreAdj":12345678901234567890},"annotations":{"a":"b"}}`)
	if added, err := AddConfig(b, "action-script /x.sh"); err != nil || len(added) != 1 {
		t.Fatalf("first line: %q %v", added, err)
	}
	added, err := AddConfig(b, "tcp-established", "action-script /x.sh", "skip-in-flight")
	if err != nil || strings.Join(added, "|") != "tcp-established" {
		t.Fatalf("added %q, %v; want tcp-established alone", added, err)
	}
	if got := confLines(t, b); got != "skip-in-flight|action-script /x.sh|tcp-established" {
		t.Fatalf("configuration %q", got)
	}
	spec, _ := os.ReadFile(filepath.Join(b, "config.json"))
	for _, want := range []string{`"a":"b"`, `12345678901234567890`, `"org.criu.config":"` + filepath.Join(b, ConfName) + `"`} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("spec %s lacks %s", spec, want)
		}
	}
	if err := RemoveConfig(b, "tcp-established"); err != nil {
		t.Fatal(err)
	}
	if got := confLines(t, b); got != "skip-in-flight|action-script /x.sh" {
		t.Fatalf("after removal: %q", got)
	}
}

func TestAddCRIUConfigForeign(t *testing.T) {
	b := bundleWith(t, `{"annotations":{"org.criu.config":"/etc/mine.conf"}}`)
	_, err := AddConfig(b, "tcp-established")
	if !errors.Is(err, ErrForeignConfig) || !strings.Contains(err.Error(), "/etc/mine.conf") || !strings.Contains(err.Error(), "`tcp-established`") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(filepath.Join(b, ConfName)); err == nil {
		t.Fatal("cryo's file written beside a foreign one")
	}
	if err := RemoveConfig(b, "tcp-established"); err != nil {
		t.Fatalf("removal from a foreign configuration: %v", err)
	}
}
