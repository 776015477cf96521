package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"syscall"

	"oras.land/oras-go/v2/registry"
)

// ErrBadPolicy: the annotation restore policy file cannot be used; the
// annotation path then stays off.
var ErrBadPolicy = errors.New("bad annotation restore policy")

// AnnotationPolicy is the node's opt-in to the annotation restore path:
// a pod that names a checkpoint image in its cryo.io/checkpoint-image
// annotation is restored from it by the shim, which pulls the image on the
// pod's behalf from the host. That makes the node, not the kubelet, the
// one that decides which pod may read which image, so the path is off
// unless this file says otherwise, and then only for the repositories it
// lists per Kubernetes namespace. It is a JSON file that
// $CRYO_ANNOTATION_RESTORE names in containerd's environment:
//
//	{
//	  "enabled": true,
//	  "namespaces": {
//	    "team-a": {"repositories": ["registry.example/team-a/"], "use_node_credentials": false},
//	    "":       {"repositories": ["registry.example/ops"]}
//	  },
//	  "insecure_registries": []
//	}
//
// The namespace "" is every container that does not come from Kubernetes
// (containerd's Go client, ctr).
type AnnotationPolicy struct {
	Enabled    bool                     `json:"enabled"`
	Namespaces map[string]NamespaceRule `json:"namespaces"`
	// InsecureRegistries (host[:port]) are spoken to over plain HTTP;
	// every other registry over HTTPS, a loopback one included.
	InsecureRegistries []string `json:"insecure_registries"`
	// Source is the file the policy was read from; "" when none was named.
	Source string `json:"-"`
}

// NamespaceRule is what the pods of one namespace may restore.
type NamespaceRule struct {
	// Repositories are repository prefixes, host[:port]/path: each allows
	// that repository and those below it, on path boundaries
	// ("reg.example/team-a" allows reg.example/team-a/x, not
	// reg.example/team-ab). A bare host[:port] allows the whole registry.
	Repositories []string `json:"repositories"`
	// UseNodeCredentials lets the shim pull for this namespace with the
	// node's registry auth files; false (the default): anonymous pulls, so
	// that a pod cannot borrow the node's identity to read what its own
	// namespace could not.
	UseNodeCredentials bool `json:"use_node_credentials"`
}

// LoadAnnotationPolicy reads and validates the policy file at path; ""
// gives the default, off. The file must be a regular file that only its
// owner (this user, or root) can write: whoever can write it decides which
// pods read which images.
func LoadAnnotationPolicy(path string) (AnnotationPolicy, error) {
	if path == "" {
		return AnnotationPolicy{}, nil
	}
	data, err := readPolicyFile(path)
	if err != nil {
		return AnnotationPolicy{}, err
	}
	p, err := ParseAnnotationPolicy(data)
	if err != nil {
		return AnnotationPolicy{}, fmt.Errorf("%s (named by %s): %w", path, EnvAnnotationRestore, err)
	}
	p.Source = path
	return p, nil
}

// readPolicyFile reads the file once it has checked who can change it.
func readPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the annotation restore policy named by %s: %w: %w", EnvAnnotationRestore, err, ErrBadPolicy)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, err, ErrBadPolicy)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s (named by %s) is not a regular file: %w", path, EnvAnnotationRestore, ErrBadPolicy)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s (named by %s) is writable by group or others (mode %04o): %w", path, EnvAnnotationRestore, fi.Mode().Perm(), ErrBadPolicy)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s (named by %s) belongs to uid %d, not to root: %w", path, EnvAnnotationRestore, st.Uid, ErrBadPolicy)
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// ParseAnnotationPolicy decodes and validates a policy. Unknown keys are
// errors: a misspelt "use_node_credentials" must not silently mean false,
// nor a misspelt "namespaces" mean none.
func ParseAnnotationPolicy(data []byte) (AnnotationPolicy, error) {
	var p AnnotationPolicy
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return AnnotationPolicy{}, fmt.Errorf("not a policy (JSON with enabled, namespaces, insecure_registries): %v: %w", err, ErrBadPolicy)
	}
	if dec.More() {
		return AnnotationPolicy{}, fmt.Errorf("data after the policy's JSON object: %w", ErrBadPolicy)
	}
	return p, p.Validate()
}

// Validate checks every name in the policy, so that a typo is an error at
// load rather than a namespace or registry that silently matches nothing.
func (p AnnotationPolicy) Validate() error {
	for _, ns := range p.namespaceNames() {
		if err := validNamespace(ns); err != nil {
			return err
		}
		rule := p.Namespaces[ns]
		if len(rule.Repositories) == 0 {
			return fmt.Errorf("namespace %q lists no repositories: list some, or remove it: %w", ns, ErrBadPolicy)
		}
		for _, r := range rule.Repositories {
			if _, err := repositoryPrefix(r); err != nil {
				return fmt.Errorf("namespace %q: %w", ns, err)
			}
		}
	}
	for _, h := range p.InsecureRegistries {
		if err := validRegistry(h); err != nil {
			return fmt.Errorf("insecure_registries: %w", err)
		}
	}
	return nil
}

// namespaceNames are the policy's namespaces, sorted.
func (p AnnotationPolicy) namespaceNames() []string {
	names := make([]string, 0, len(p.Namespaces))
	for ns := range p.Namespaces {
		names = append(names, ns)
	}
	sort.Strings(names)
	return names
}

// NodeCredentialNamespaces are the namespaces whose pulls may use the
// node's credentials, sorted.
func (p AnnotationPolicy) NodeCredentialNamespaces() []string {
	var out []string
	for _, ns := range p.namespaceNames() {
		if p.Namespaces[ns].UseNodeCredentials {
			out = append(out, ns)
		}
	}
	return out
}

// Allows reports whether the pods of namespace may restore from
// repository (host[:port]/path, as a reference names it), and the rule
// that allows it.
func (p AnnotationPolicy) Allows(namespace, repository string) (NamespaceRule, bool) {
	rule, ok := p.Namespaces[namespace]
	if !ok || !p.Enabled {
		return NamespaceRule{}, false
	}
	repository = lowerHost(repository)
	for _, r := range rule.Repositories {
		prefix, err := repositoryPrefix(r)
		if err == nil && (repository == prefix || strings.HasPrefix(repository, prefix+"/")) {
			return rule, true
		}
	}
	return NamespaceRule{}, false
}

// Insecure reports whether registry (host[:port]) is listed for plain
// HTTP. Only an exact listing counts: a loopback address is not implied.
func (p AnnotationPolicy) Insecure(reg string) bool {
	for _, h := range p.InsecureRegistries {
		if strings.EqualFold(h, reg) {
			return true
		}
	}
	return false
}

// namespaceRE is a Kubernetes namespace name (an RFC 1123 label).
var namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func validNamespace(ns string) error {
	if ns == "" || namespaceRE.MatchString(ns) {
		return nil
	}
	return fmt.Errorf("namespace %q is not a Kubernetes namespace name (lower case letters, digits and '-', at most 63), nor \"\" for containers outside Kubernetes: %w", ns, ErrBadPolicy)
}

// repositoryPrefix validates an allowlist entry and returns it in the form
// Allows compares: host in lower case, no trailing slash.
func repositoryPrefix(entry string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("repository %q %s; want host[:port]/path or host[:port], e.g. registry.example/team-a/: %w", entry, why, ErrBadPolicy)
	}
	if strings.Contains(entry, "://") {
		return bad("has a scheme")
	}
	if strings.ContainsAny(entry, "@*?[ ") {
		return bad("has a digest, a pattern or a space")
	}
	trimmed := strings.TrimSuffix(entry, "/")
	host, path, hasPath := strings.Cut(trimmed, "/")
	if err := validRegistry(host); err != nil {
		return bad("has no valid registry host")
	}
	if hasPath {
		if strings.Contains(path, ":") {
			return bad("has a tag")
		}
		if (registry.Reference{Registry: host, Repository: path}).ValidateRepository() != nil {
			return bad("is not a valid repository path (lower case, no empty parts)")
		}
	}
	return lowerHost(trimmed), nil
}

// validRegistry accepts host[:port] alone.
func validRegistry(h string) error {
	if h == "" || strings.ContainsAny(h, "/@ ") || (registry.Reference{Registry: h}).ValidateRegistry() != nil {
		return fmt.Errorf("registry %q is not host[:port]: %w", h, ErrBadPolicy)
	}
	return nil
}

// lowerHost lower-cases the host part: host names are case-insensitive,
// repository paths are lower case already.
func lowerHost(repo string) string {
	host, path, ok := strings.Cut(repo, "/")
	if !ok {
		return strings.ToLower(host)
	}
	return strings.ToLower(host) + "/" + path
}
