package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The environment file: comments, blanks, export and quotes are read as a
// shell would; a variable already set wins; a malformed line names its
// line number; a named file that is missing is an error, the default one
// is not; and nothing is written into the process environment.
func TestLoadEnvFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cryo-runc.env")
	os.WriteFile(path, []byte("# settings\n\nCRYO_RUNC=/opt/runc\nexport CRYO_LIBCUDA=\"/opt/lib cuda.so\"\nCRYO_CRIU=file\n"), 0o600)
	t.Setenv(EnvCRIU, "caller")
	for _, k := range []string{EnvRunc, EnvLibCUDA, EnvEnvFile} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Runc != "/opt/runc" || c.LibCUDA != "/opt/lib cuda.so" || c.CRIU != "caller" || c.EnvFile != path {
		t.Errorf("config %+v: want the file's runc and libcuda, the caller's criu", c)
	}
	if os.Getenv(EnvRunc) != "" {
		t.Error("Load wrote into the process environment")
	}
	if !slices.Contains(c.Environ, "CRYO_RUNC=/opt/runc") || slices.Contains(c.Environ, "CRYO_CRIU=file") {
		t.Errorf("children's environment %v: want the file's settings beneath the caller's", c.Environ)
	}
	bad := filepath.Join(t.TempDir(), "bad.env")
	os.WriteFile(bad, []byte("CRYO_OK=1\njust words\n"), 0o600)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "bad.env:2") {
		t.Fatalf("malformed line: %v, want it named with its line number", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.env")); err == nil {
		t.Fatal("a named environment file that is missing was ignored")
	}
}

// Defaults, booleans and durations, and an invalid duration reported
// rather than fatal.
func TestParse(t *testing.T) {
	c := parse(nil)
	if c.LockDir != DefaultLockDir || c.HashAfterDump || c.VerifyFull || c.CopyTimeout != 0 || len(c.Problems) != 0 {
		t.Errorf("defaults: %+v", c)
	}
	c = parse([]string{EnvDigestWatch + "=0", EnvVerify + "=full", EnvCopyTimeout + "=90s", EnvAllowCUDAIPC + "=1", EnvLockDir + "=/tmp/l"})
	if !c.HashAfterDump || !c.VerifyFull || c.CopyTimeout != 90*time.Second || !c.AllowCUDAIPC || c.LockDir != "/tmp/l" {
		t.Errorf("set: %+v", c)
	}
	for _, v := range []string{"soon", "-5s", "0"} {
		c = parse([]string{EnvCopyTimeout + "=" + v})
		if c.CopyTimeout != 0 || len(c.Problems) != 1 || !strings.Contains(c.Problems[0].Error(), "remedy") {
			t.Errorf("%s=%s: %v %v, want the default and one problem with a remedy", EnvCopyTimeout, v, c.CopyTimeout, c.Problems)
		}
	}
}
