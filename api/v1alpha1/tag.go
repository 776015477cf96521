package v1alpha1

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/distribution/reference"
)

// MaxTagLength is the longest tag the OCI distribution spec allows.
const MaxTagLength = 128

// generateSuffix is how many characters the API server appends to a
// generateName.
const generateSuffix = 5

// tagPattern is the OCI distribution spec's tag grammar.
var tagPattern = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

// ErrInvalidTag is a Checkpoint whose image reference cannot be pushed.
var ErrInvalidTag = errors.New("invalid checkpoint image reference")

// ImageRef is where the agent pushes a Checkpoint's image: its
// repository, tagged with the Checkpoint's name (unique in its namespace
// at any time).
func ImageRef(cp *Checkpoint) string { return cp.Spec.Repository + ":" + cp.Name }

// ValidateImageRef says why the Checkpoint's image cannot be pushed
// under ImageRef, or nil. A Checkpoint's name may be 253 characters
// long, a tag only 128: both the webhook and the agent ask, so that such
// a Checkpoint fails before any pod is touched. A name still to be
// generated is checked at the length it will have.
func ValidateImageRef(cp *Checkpoint) error {
	name := cp.Name
	if name == "" && cp.GenerateName != "" {
		name = cp.GenerateName + "xxxxx"[:generateSuffix]
	}
	if len(name) > MaxTagLength {
		return fmt.Errorf("%w: the Checkpoint's name %q is its image's tag, and has %d characters, more than the %d a tag may have: give it a shorter name (kubectl cryo checkpoint --name)",
			ErrInvalidTag, name, len(name), MaxTagLength)
	}
	if !tagPattern.MatchString(name) {
		return fmt.Errorf("%w: the Checkpoint's name %q is not a valid image tag ([a-zA-Z0-9_][a-zA-Z0-9._-]*): rename it", ErrInvalidTag, name)
	}
	n, err := reference.ParseNormalizedNamed(cp.Spec.Repository)
	if err != nil {
		return fmt.Errorf("%w: spec.repository %q: %v: name a repository such as registry.example:5000/team/app", ErrInvalidTag, cp.Spec.Repository, err)
	}
	if !reference.IsNameOnly(n) {
		return fmt.Errorf("%w: spec.repository %q carries a tag or digest: drop it, the Checkpoint's name is the tag", ErrInvalidTag, cp.Spec.Repository)
	}
	return nil
}
