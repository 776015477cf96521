package imagetrust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/cryo-gpu/cryo/internal/config"
)

const (
	// EnvPolicy names the signature policy file; unset: DefaultPolicy,
	// when it exists. The shim reads it from containerd's environment.
	EnvPolicy = "CRYO_SIGNATURE_POLICY"
	// DefaultPolicy is read when EnvPolicy and --policy are unset. Its
	// absence is today's behaviour: pulls are not verified.
	DefaultPolicy = "/etc/cryo/policy.json"
)

// PolicyPath is the policy file in force for a flag's value (file, "" if
// none) and an environment (nil: this process's), and whether someone
// named it: a named file must exist, the default one may not.
func PolicyPath(file string, environ []string) (string, bool) {
	if file != "" {
		return file, true
	}
	if environ == nil {
		environ = os.Environ()
	}
	if p := config.Lookup(environ, EnvPolicy); p != "" {
		return p, true
	}
	return DefaultPolicy, false
}

// LoadConfigured loads the policy in force (see PolicyPath); nil and no
// error when none is configured.
func LoadConfigured(file string, environ []string) (*Policy, error) {
	path, named := PolicyPath(file, environ)
	if _, err := os.Stat(path); !named && errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	p, err := Load(path)
	if err != nil && !named {
		return nil, fmt.Errorf("%w (the default policy file; remove it to pull unverified)", err)
	}
	return p, err
}
