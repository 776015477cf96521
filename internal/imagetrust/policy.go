package imagetrust

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Policy is cryo's signature policy: which signer each repository's
// checkpoint images need. A JSON file:
//
//	{
//	  "default": "reject",
//	  "rules": [
//	    {"repository": "registry.example/ckpt", "key": "/etc/cryo/keys/ckpt.pub"},
//	    {"repository": "registry.example/ci", "trusted_root": "/etc/cryo/trusted_root.json",
//	     "identity": {"issuer": "https://issuer.example", "subject": "ci@example.com"}},
//	    {"repository": "localhost:5000/scratch", "accept_unsigned": true}
//	  ]
//	}
//
// The rule with the longest repository prefix (whole path segments) that
// covers an image's repository applies; an image no rule covers follows
// "default": "reject" (the default) or "accept" (unverified).
type Policy struct {
	Source  string `json:"-"` // the file it was read from
	Default string `json:"default,omitempty"`
	Rules   []Rule `json:"rules"`
}

// Rule is what one repository prefix needs.
type Rule struct {
	// Repository is host[:port] or host[:port]/path: it covers that
	// repository and those beneath it.
	Repository string `json:"repository"`
	// Key is a PEM public key file (cosign.pub): signatures by its private
	// key are accepted. Relative paths are read from the policy's
	// directory.
	Key string `json:"key,omitempty"`
	// TrustedRoot is a Sigstore trusted root file (trusted_root.json):
	// keyless signatures whose certificate it trusts and whose identity
	// matches Identity are accepted; with Key, the signature must also be
	// in its transparency log.
	TrustedRoot string    `json:"trusted_root,omitempty"`
	Identity    *Identity `json:"identity,omitempty"`
	// AcceptUnsigned exempts the prefix: its images are pulled unverified.
	AcceptUnsigned bool `json:"accept_unsigned,omitempty"`

	check *checker // built by Load from the files above
}

// Identity is the signer of a keyless signature: the certificate's OIDC
// issuer and subject (an e-mail or URI), each exact or a regular
// expression.
type Identity struct {
	Issuer        string `json:"issuer,omitempty"`
	IssuerRegexp  string `json:"issuer_regexp,omitempty"`
	Subject       string `json:"subject,omitempty"`
	SubjectRegexp string `json:"subject_regexp,omitempty"`
}

const maxPolicySize = 1 << 20

// Load reads and checks the policy at path, with its keys and trusted
// roots, so that a mistake shows when the file is read (`cryo doctor`),
// not at the first pull.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the signature policy %s: %w: %w", path, err, ErrPolicy)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicySize+1))
	if err != nil || len(data) > maxPolicySize {
		return nil, fmt.Errorf("read the signature policy %s: %v (at most %d bytes): %w", path, err, maxPolicySize, ErrPolicy)
	}
	p, err := Parse(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("signature policy %s: %w", path, err)
	}
	p.Source = path
	return p, nil
}

// Parse reads a policy; relative file names are taken from dir. Unknown
// fields are refused: a misspelt "key" must not read as "no signer".
func Parse(data []byte, dir string) (*Policy, error) {
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("not a signature policy (JSON with \"rules\"): %v: %w", err, ErrPolicy)
	}
	if p.Default != "" && p.Default != "reject" && p.Default != "accept" {
		return nil, fmt.Errorf("\"default\" is %q: want \"reject\" or \"accept\": %w", p.Default, ErrPolicy)
	}
	for i := range p.Rules {
		if err := p.Rules[i].prepare(dir); err != nil {
			return nil, fmt.Errorf("rule %d (%q): %w", i+1, p.Rules[i].Repository, err)
		}
	}
	return &p, nil
}

// KeyPolicy is the policy of --signature-key: every repository needs a
// signature by the key in file.
func KeyPolicy(file string) (*Policy, error) {
	r := Rule{Key: file}
	if err := r.prepare(""); err != nil {
		return nil, fmt.Errorf("--signature-key: %w", err)
	}
	return &Policy{Source: "--signature-key " + file, Default: "reject", Rules: []Rule{r}}, nil
}

// prepare checks the rule and loads its signer.
func (r *Rule) prepare(dir string) error {
	r.Repository = strings.TrimSuffix(r.Repository, "/")
	if r.AcceptUnsigned {
		if r.Key != "" || r.TrustedRoot != "" || r.Identity != nil {
			return fmt.Errorf("accept_unsigned takes no key, trusted_root or identity: %w", ErrPolicy)
		}
		return nil
	}
	r.Key, r.TrustedRoot = under(dir, r.Key), under(dir, r.TrustedRoot)
	c, err := newChecker(r.Key, r.TrustedRoot, r.Identity)
	r.check = c
	return err
}

// under makes a relative file name relative to dir.
func under(dir, name string) string {
	if name == "" || filepath.IsAbs(name) || dir == "" {
		return name
	}
	return filepath.Join(dir, name)
}

// Match is the rule covering repo (host[:port]/path), if any: the one with
// the longest prefix, compared by whole path segments, the host without
// regard to case.
func (p *Policy) Match(repo string) (*Rule, bool) {
	var best *Rule
	for i := range p.Rules {
		r := &p.Rules[i]
		if covers(r.Repository, repo) && (best == nil || len(r.Repository) > len(best.Repository)) {
			best = r
		}
	}
	return best, best != nil
}

// covers: an empty prefix covers every repository.
func covers(prefix, repo string) bool {
	if prefix == "" {
		return true
	}
	prefix, repo = lowerHost(prefix), lowerHost(repo)
	return repo == prefix || strings.HasPrefix(repo, prefix+"/")
}

func lowerHost(repo string) string {
	host, rest, _ := strings.Cut(repo, "/")
	if rest == "" {
		return strings.ToLower(host)
	}
	return strings.ToLower(host) + "/" + rest
}

// accepts: what an image no rule covers gets.
func (p *Policy) accepts() bool { return p.Default == "accept" }

// describe names the rule in messages: its prefix, file and signer.
func (r *Rule) describe(p *Policy) string {
	name := fmt.Sprintf("rule %q of %s", r.Repository, p.Source)
	if r.Repository == "" {
		name = fmt.Sprintf("the rule for every repository of %s", p.Source)
	}
	return name + " (" + r.signer() + ")"
}

// signer says who must have signed.
func (r *Rule) signer() string {
	switch {
	case r.AcceptUnsigned:
		return "unsigned accepted"
	case r.Key != "" && r.TrustedRoot != "":
		return "key " + r.Key + ", in the transparency log of " + r.TrustedRoot
	case r.Key != "":
		return "key " + r.Key
	}
	return "keyless, trusted root " + r.TrustedRoot + ", " + r.Identity.String()
}

func (id *Identity) String() string {
	if id == nil {
		return "no identity"
	}
	return "issuer " + cmp.Or(id.Issuer, "~"+id.IssuerRegexp) + ", subject " + cmp.Or(id.Subject, "~"+id.SubjectRegexp)
}

// errNoSigner: a rule that neither names a signer nor exempts its prefix.
var errNoSigner = errors.New(`names no signer: give "key", or "trusted_root" with "identity", or "accept_unsigned": true`)
