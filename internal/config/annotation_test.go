package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodPolicy = `{
  "enabled": true,
  "namespaces": {
    "team-a": {"repositories": ["Registry.Example/team-a/", "reg.example:5000"], "use_node_credentials": true},
    "":       {"repositories": ["registry.example/ops"]}
  },
  "insecure_registries": ["127.0.0.1:5000"]
}`

// Unset: off, no error. A file: read, validated, and its path kept; the
// variable is read into Config.
func TestLoadAnnotationPolicy(t *testing.T) {
	if p, err := LoadAnnotationPolicy(""); err != nil || p.Enabled {
		t.Fatalf("unset: %+v %v, want off", p, err)
	}
	path := writePolicy(t, goodPolicy, 0o600)
	p, err := LoadAnnotationPolicy(path)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Enabled || p.Source != path || len(p.Namespaces) != 2 || !p.Namespaces["team-a"].UseNodeCredentials || p.Namespaces[""].UseNodeCredentials {
		t.Errorf("policy %+v", p)
	}
	if got := p.NodeCredentialNamespaces(); len(got) != 1 || got[0] != "team-a" {
		t.Errorf("node credential namespaces %q", got)
	}
	if c := parse([]string{EnvAnnotationRestore + "=" + path}); c.AnnotationRestore != path {
		t.Errorf("%s not read: %+v", EnvAnnotationRestore, c.AnnotationRestore)
	}
	if c := parse(nil); c.AnnotationRestore != "" {
		t.Errorf("default %q, want off", c.AnnotationRestore)
	}
}

// Every mistake is an error at load that names what is wrong, so that the
// path stays off rather than matching less, or more, than the admin meant.
func TestAnnotationPolicyInvalid(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"misspelt key", `{"enabled": true, "namespaces": {"a": {"repositories": ["r.example/a"], "use_node_credential": true}}}`, "use_node_credential"},
		{"not JSON", `enabled = true`, "not a policy"},
		{"trailing data", `{"enabled": true} {"enabled": false}`, "data after"},
		{"no repositories", `{"enabled": true, "namespaces": {"a": {}}}`, `namespace "a" lists no repositories`},
		{"namespace name", `{"namespaces": {"Team_A": {"repositories": ["r.example/a"]}}}`, `"Team_A" is not a Kubernetes namespace`},
		{"scheme", `{"namespaces": {"a": {"repositories": ["https://r.example/a"]}}}`, "has a scheme"},
		{"tag", `{"namespaces": {"a": {"repositories": ["r.example/a:v1"]}}}`, "has a tag"},
		{"digest", `{"namespaces": {"a": {"repositories": ["r.example/a@sha256:00"]}}}`, "has a digest"},
		{"pattern", `{"namespaces": {"a": {"repositories": ["r.example/*"]}}}`, "pattern"},
		{"upper case path", `{"namespaces": {"a": {"repositories": ["r.example/Team"]}}}`, "not a valid repository path"},
		{"empty part", `{"namespaces": {"a": {"repositories": ["r.example//a"]}}}`, "not a valid repository path"},
		{"no host", `{"namespaces": {"a": {"repositories": ["/a"]}}}`, "no valid registry host"},
		{"insecure with a path", `{"insecure_registries": ["r.example/a"]}`, "insecure_registries"},
		{"insecure with a scheme", `{"insecure_registries": ["http://r.example"]}`, "insecure_registries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadAnnotationPolicy(writePolicy(t, c.body, 0o600))
			if !errors.Is(err, ErrBadPolicy) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), EnvAnnotationRestore) {
				t.Errorf("error %v, want ErrBadPolicy naming %q and %s", err, c.want, EnvAnnotationRestore)
			}
		})
	}
}

// Whoever can write the policy decides which pods read which images: a
// file that others can write, a directory and a missing file are refused.
func TestAnnotationPolicyFile(t *testing.T) {
	for name, path := range map[string]string{
		"group-writable": writePolicy(t, goodPolicy, 0o620),
		"world-writable": writePolicy(t, goodPolicy, 0o606),
		"directory":      t.TempDir(),
		"missing":        filepath.Join(t.TempDir(), "none.json"),
	} {
		if _, err := LoadAnnotationPolicy(path); !errors.Is(err, ErrBadPolicy) {
			t.Errorf("%s: %v, want ErrBadPolicy", name, err)
		}
	}
}

// The allowlist matches on repository path boundaries, per namespace, host
// names in any case; a bare host allows that host and port only.
func TestAnnotationPolicyAllows(t *testing.T) {
	p, err := ParseAnnotationPolicy([]byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns, repo string
		want     bool
	}{
		{"team-a", "registry.example/team-a", true},
		{"team-a", "registry.example/team-a/model/x", true},
		{"team-a", "REGISTRY.example/team-a/x", true},
		{"team-a", "registry.example/team-ab", false},
		{"team-a", "registry.example/team-ab/x", false},
		{"team-a", "registry.example/team", false},
		{"team-a", "registry.example/other/team-a", false},
		{"team-a", "registry.example.evil/team-a/x", false},
		{"team-a", "reg.example:5000/anything/at/all", true},
		{"team-a", "reg.example/anything", false},
		{"team-a", "reg.example:50001/anything", false},
		{"tenant-b", "registry.example/team-a/x", false},
		{"", "registry.example/ops", true},
		{"", "registry.example/team-a/x", false},
		{"team-a", "registry.example/ops", false},
	} {
		if _, got := p.Allows(c.ns, c.repo); got != c.want {
			t.Errorf("Allows(%q, %q) = %v, want %v", c.ns, c.repo, got, c.want)
		}
	}
	p.Enabled = false
	if _, ok := p.Allows("team-a", "registry.example/team-a"); ok {
		t.Error("a disabled policy allowed a repository")
	}
}

// Plain HTTP is for the registries listed, exactly: not another port, not
// another loopback name.
func TestAnnotationPolicyInsecure(t *testing.T) {
	p, err := ParseAnnotationPolicy([]byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for reg, want := range map[string]bool{"127.0.0.1:5000": true, "127.0.0.1:5001": false, "localhost:5000": false, "127.0.0.1": false, "registry.example": false} {
		if got := p.Insecure(reg); got != want {
			t.Errorf("Insecure(%q) = %v, want %v", reg, got, want)
		}
	}
	if (AnnotationPolicy{}).Insecure("localhost:5000") {
		t.Error("the default policy has an insecure registry")
	}
}

func writePolicy(t *testing.T, body string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "annotation-restore.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}
