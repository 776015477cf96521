package imagetrust

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestParseRefuses: every mistake is an ErrPolicy naming the rule, never a
// policy that silently accepts.
func TestParseRefuses(t *testing.T) {
	key := newSigner(t).pub
	root := filepath.Join(t.TempDir(), "trusted_root.json")
	os.WriteFile(root, []byte("{}"), 0o600)
	for _, c := range []struct{ name, json, want string }{
		{"not JSON", `rules:`, "not a signature policy"},
		{"misspelt field", `{"rules": [{"repository": "r.test/a", "kye": "` + key + `"}]}`, `unknown field "kye"`},
		{"bad default", `{"default": "allow", "rules": []}`, `"default" is "allow"`},
		{"no signer", `{"rules": [{"repository": "r.test/a"}]}`, "names no signer"},
		{"missing key", `{"rules": [{"repository": "r.test/a", "key": "/nonexistent.pub"}]}`, "/nonexistent.pub"},
		{"not a key", `{"rules": [{"repository": "r.test/a", "key": "` + root + `"}]}`, "not a PEM public key"},
		{"keyless without identity", `{"rules": [{"repository": "r.test/a", "trusted_root": "` + root + `"}]}`, `needs "identity"`},
		{"bad trusted root", `{"rules": [{"repository": "r.test/a", "trusted_root": "` + root + `", "identity": {"issuer": "i", "subject": "s"}}]}`, "trusted root " + root},
		{"exempt with a key", `{"rules": [{"repository": "r.test/a", "accept_unsigned": true, "key": "` + key + `"}]}`, "accept_unsigned takes no key"},
	} {
		_, err := Parse([]byte(c.json), "")
		if !errors.Is(err, ErrPolicy) {
			t.Errorf("%s: got %v, want ErrPolicy", c.name, err)
			continue
		}
		wantIn(t, c.name, err.Error(), c.want)
	}
}

// TestLoadRelativeKey: a key named relative to the policy is read from the
// policy's directory.
func TestLoadRelativeKey(t *testing.T) {
	s := newSigner(t)
	dir := filepath.Dir(s.pub)
	path := filepath.Join(dir, "policy.json")
	os.WriteFile(path, []byte(`{"rules": [{"repository": "r.test/a", "key": "cosign.pub"}]}`), 0o600)
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != path || p.Rules[0].Key != s.pub || p.Rules[0].check == nil {
		t.Errorf("loaded %+v, want the key %s", p, s.pub)
	}
}

// TestMatch: the longest prefix wins, by whole path segments, the host
// compared without regard to case.
func TestMatch(t *testing.T) {
	p := &Policy{Rules: []Rule{{Repository: "R.test"}, {Repository: "r.test/ckpt"}, {Repository: "r.test/ckpt/team-b"}}}
	for repo, want := range map[string]string{
		"r.test/ckpt/app":         "r.test/ckpt",
		"r.test/ckpt":             "r.test/ckpt",
		"r.test/ckpt2/app":        "R.test",
		"r.test/ckpt/team-b/x":    "r.test/ckpt/team-b",
		"R.TEST/ckpt/team-b":      "r.test/ckpt/team-b",
		"r.test/Ckpt/app":         "R.test",
		"other.test/ckpt/team-b":  "",
		"r.test:5000/ckpt/team-b": "",
	} {
		r, ok := p.Match(repo)
		if got := ""; ok {
			got = r.Repository
			if got != want {
				t.Errorf("%s: rule %q, want %q", repo, got, want)
			}
		} else if want != "" {
			t.Errorf("%s: no rule, want %q", repo, want)
		}
	}
}

// TestLoadConfigured: no file at the default place is no policy (today's
// unverified pulls); a file someone named must exist; the environment
// names one.
func TestLoadConfigured(t *testing.T) {
	if _, err := os.Stat(DefaultPolicy); err == nil {
		t.Skip(DefaultPolicy + " exists on this host")
	}
	if p, err := LoadConfigured("", []string{}); p != nil || err != nil {
		t.Errorf("no policy configured: got %v, %v", p, err)
	}
	missing := filepath.Join(t.TempDir(), "policy.json")
	if _, err := LoadConfigured(missing, nil); !errors.Is(err, ErrPolicy) {
		t.Errorf("--policy of a missing file: got %v, want ErrPolicy", err)
	}
	if _, err := LoadConfigured("", []string{EnvPolicy + "=" + missing}); !errors.Is(err, ErrPolicy) {
		t.Errorf("$%s of a missing file: got %v, want ErrPolicy", EnvPolicy, err)
	}
	os.WriteFile(missing, []byte(`{"default": "accept", "rules": []}`), 0o600)
	if p, err := LoadConfigured("", []string{EnvPolicy + "=" + missing}); err != nil || p == nil || !p.accepts() {
		t.Errorf("$%s: got %+v, %v", EnvPolicy, p, err)
	}
}
