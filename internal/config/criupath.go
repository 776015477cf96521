package config

import (
	"path/filepath"
	"strings"
)

// DefaultPath is searched when a caller passed no PATH (Podman runs some
// runtime commands with none).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// CRIUFirst returns environ with PATH led by the directory of criu
// ($CRYO_CRIU), for the runc that cryo-runc and the shim run. runc starts
// the `criu` it finds on PATH, by name, and not the one cryo checked: on a
// host whose PATH has a distribution's CRIU first, containers would dump
// and restore with it and fail (CRIU 4.1 on a current kernel) or lose
// cryo's fill. Only an absolute criu named `criu` can lead PATH that way;
// anything else leaves environ as it is, and `cryo doctor` says so.
func CRIUFirst(environ []string, criu string) []string {
	if !filepath.IsAbs(criu) || filepath.Base(criu) != "criu" {
		return environ
	}
	dir := filepath.Dir(criu)
	path := Lookup(environ, "PATH")
	if path == "" {
		path = DefaultPath
	}
	if first, _, _ := strings.Cut(path, ":"); first == dir {
		return environ
	}
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	return append(out, "PATH="+dir+":"+path)
}

// WithSeccompDir returns environ with $CRYO_CRIU_SECCOMP_DIR set (to
// DefaultSeccompDir unless it is), for the runc that cryo-runc and the shim run: CRIU inherits
// it through runc and writes the restored threads' seccomp filters there
// for the outcome check (contrib/criu patch 0005), in a directory of its
// own pid, so one value serves every restore at once.
func WithSeccompDir(environ []string) []string {
	if Lookup(environ, EnvCRIUSeccompDir) != "" {
		return environ
	}
	return append(append([]string(nil), environ...), EnvCRIUSeccompDir+"="+DefaultSeccompDir)
}
