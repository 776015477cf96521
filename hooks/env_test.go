package hooks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The environment file: comments, blanks, export and quotes are read as a
// shell would; a variable already set wins; a malformed line names its
// line number; a named file that is missing is an error, the default one
// is not.
func TestLoadEnvFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cryo-runc.env")
	os.WriteFile(path, []byte("# settings\n\nCRYO_TEST_A=one\nexport CRYO_TEST_B=\"two words\"\nCRYO_TEST_C=file\n"), 0o600)
	t.Setenv("CRYO_TEST_C", "caller")
	for _, k := range []string{"CRYO_TEST_A", "CRYO_TEST_B"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	if err := LoadEnvFile(path); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"CRYO_TEST_A": "one", "CRYO_TEST_B": "two words", "CRYO_TEST_C": "caller"} {
		if got := os.Getenv(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.env")
	os.WriteFile(bad, []byte("CRYO_OK=1\njust words\n"), 0o600)
	if err := LoadEnvFile(bad); err == nil || !strings.Contains(err.Error(), "bad.env:2") {
		t.Fatalf("malformed line: %v, want it named with its line number", err)
	}
	if err := LoadEnvFile(filepath.Join(t.TempDir(), "missing.env")); err == nil {
		t.Fatal("a named environment file that is missing was ignored")
	}
}
