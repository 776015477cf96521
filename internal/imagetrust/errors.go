package imagetrust

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
)

// Sentinel errors; concrete errors wrap them.
var (
	// ErrPolicy: the policy file (or a key or trusted root it names)
	// cannot be used. Every pull it governs is refused until it is fixed:
	// a broken policy must not read as "no policy".
	ErrPolicy = errors.New("signature policy unusable")
	// ErrNotTrusted: the policy refuses the image. It is containerd's
	// PermissionDenied, as the shim reports it to the kubelet.
	ErrNotTrusted = fmt.Errorf("checkpoint image not trusted: %w", errdefs.ErrPermissionDenied)
	// ErrUnsigned: the image's digest has no signature at all.
	ErrUnsigned = fmt.Errorf("no signature: %w", ErrNotTrusted)
	// ErrBadSignature: signatures exist, but none verifies for this
	// digest with the rule's signer.
	ErrBadSignature = fmt.Errorf("no valid signature: %w", ErrNotTrusted)
	// ErrRejected: no rule covers the repository and the policy's default
	// is to reject.
	ErrRejected = fmt.Errorf("repository not covered by the policy: %w", ErrNotTrusted)
)
