// Package confine checks, before anything is restored, that a checkpoint
// claims no right its new container spec does not grant.
//
// CRIU restores credentials, capabilities, securebits, no_new_privs,
// seccomp filters, namespaces, cgroup paths, mounts and /dev contents from
// its images, and runc does not re-apply the spec's over them. An image is
// therefore a privilege claim: a checkpoint of a privileged container, or
// an edited image, would come back with rights the new spec forbids. Check
// reads those claims from the CRIU images themselves (never from cryo's
// manifest, which is the image's own word) and refuses the restore when
// any task exceeds the spec. The rule is "no more than the spec grants": a
// process that dropped rights after it started (fewer capabilities, a
// stricter seccomp filter) passes.
package confine

import (
	"errors"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ErrExceedsSpec marks a checkpoint that claims more than its new spec
// grants.
var ErrExceedsSpec = errors.New("the checkpoint claims more rights than the container's spec grants")

// Violation is one claim of the image that the spec does not grant.
type Violation struct {
	Task  string // the thread or process, or "the checkpoint" for image-wide claims
	Field string // what is claimed: "uid", "capabilities (bounding)", "network namespace", …
	Image string // the image's value
	Spec  string // what the spec grants
}

func (v *Violation) Error() string {
	return fmt.Sprintf("%s: %s is %s in the checkpoint, but the container's spec grants %s", v.Task, v.Field, v.Image, v.Spec)
}

func (v *Violation) Unwrap() error { return ErrExceedsSpec }

// Check reads the CRIU images in dir and returns nil when nothing they
// would restore exceeds spec, else the first *Violation (which wraps
// ErrExceedsSpec). An image that cannot be read is an error too: a check
// that cannot read the images cannot vouch for them.
func Check(dir string, spec *specs.Spec) error {
	if spec == nil {
		return errors.New("confine: no spec to check the checkpoint against")
	}
	im, err := readImage(dir)
	if err != nil {
		return err
	}
	checks := []func(*image, *specs.Spec) error{checkCreds, checkSeccomp, checkNamespaces, checkCgroups, checkMounts, checkDevices, checkLimits}
	for _, c := range checks {
		if err := c(im, spec); err != nil {
			return err
		}
	}
	return nil
}
