package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/report"
)

// LoadFile reads what the file alone sets, whatever the process's
// environment holds, and names a malformed line; EnvFilePath follows
// Load's choice of file.
func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cryo-runc.env")
	os.WriteFile(path, []byte("CRYO_RUNC=/opt/runc\nCRYO_COPY_TIMEOUT=soon\n"), 0o600)
	t.Setenv(EnvCRIU, "/from/the/caller")
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Runc != "/opt/runc" || c.CRIU != "" || c.EnvFile != path || len(c.Problems) != 1 || len(c.Environ) != 2 {
		t.Errorf("config %+v: want the file's settings only, with its bad duration as a problem", c)
	}
	os.WriteFile(path, []byte("\nnonsense\n"), 0o600)
	_, err = LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), "cryo-runc.env:2") {
		t.Errorf("malformed file: %v", err)
	}
	var rm report.Remedied
	if !errors.As(err, &rm) || rm.RemedyText() != "fix that line" || strings.Contains(rm.Cause(), "remedy") {
		t.Errorf("malformed file: the remedy is not a value: %v", rm)
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file loaded")
	}

	t.Setenv(EnvEnvFile, "/etc/named.env")
	if got := EnvFilePath(""); got != "/etc/named.env" {
		t.Errorf("EnvFilePath with $%s: %q", EnvEnvFile, got)
	}
	if got := EnvFilePath("/flag.env"); got != "/flag.env" {
		t.Errorf("EnvFilePath with a flag: %q", got)
	}
	os.Unsetenv(EnvEnvFile)
	if got := EnvFilePath(""); got != DefaultEnvFile {
		t.Errorf("EnvFilePath by default: %q", got)
	}
}
