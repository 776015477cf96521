package imagerestore

import (
	"context"
	"fmt"

	godigest "github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/registry"

	"github.com/cryo-gpu/cryo/internal/imagetrust"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
)

// A checkpoint image becomes a restore's work directory in two steps,
// the same for every front end: Fetch (open the store, verify, find or
// pull, load, check) and Fetched.Unpack (make or take the work directory,
// unpack verified, check again). The shim's Prepare runs them behind the
// node's policy (Authorize); `cryo image restore` runs them for the image
// its user names, printing between the two what it must say before the
// unpack. Each failure is a *Failure naming its step, so that each front
// end words it its own way: the shim as a report.StepError with the
// node's remedies, the CLI as the step's own error.

// PullMode says when Fetch pulls the image from its registry.
type PullMode int

const (
	// PullNever: the image must be in the local store.
	PullNever PullMode = iota
	// PullAlways: the image is pulled first (blobs the store has are
	// not fetched again); `cryo image restore --pull`.
	PullAlways
	// PullMissing: the image is pulled only when the store has no copy of
	// the pinned digest; a pod's restore.
	PullMissing
)

// FetchOptions says which image Fetch makes ready, and how.
type FetchOptions struct {
	Ref string // the image's name, in the store or its registry
	// Pin, when set, is the only digest the image may have: its signature
	// is verified (under the signature policy of this process's
	// environment) before the image is looked up, a stored copy counts
	// under another name of the same repository, and what is pulled,
	// loaded and unpacked is checked against it.
	Pin  godigest.Digest
	Pull PullMode
	// Transfer is how a pull reaches the registry: its options, attempts,
	// progress and signature verifier (Verify: a tag's pull, judged
	// before any layer moves).
	Transfer ociimage.TransferOptions
	// Container refuses a checkpoint whose processes did not come from a
	// container: a bare process tree's, by its kind before the unpack
	// and by its missing container spec after it.
	Container bool
	// Check, when set, runs the checks that need no layer: on the
	// registry's manifest before a pull (a mistake costs a round trip, not
	// gigabytes), and on the stored image before the unpack (a tag may
	// have moved meanwhile).
	Check func(context.Context, *ociimage.Image) error
	// Store is the local store's root, opened (created when missing) with
	// Records; Open, when set, opens it instead (the CLI's own opening,
	// which refuses a missing store unless it pulls).
	Store   string
	Records digest.Records
	Open    func(context.Context) (*ociimage.Store, error)
}

// Fetched is a checkpoint image present in the local store, loaded and
// checked, not yet unpacked.
type Fetched struct {
	Image  *ociimage.Image
	Pulled bool   // false when the image was found in the local store
	ref    string // as the caller named it
	pin    godigest.Digest
	name   string // the name it has in the store
	st     *ociimage.Store
	spec   bool // the unpacked checkpoint must hold a container spec
}

// Fetch opens the store, verifies a pinned image's signature, finds the
// image in the store or pulls it (after Check on the registry's
// manifest), loads it, and checks it against the pin, the container kind
// and Check.
func Fetch(ctx context.Context, o FetchOptions) (*Fetched, error) {
	st, err := o.open(ctx)
	if err != nil {
		return nil, fail(StepOpenStore, err)
	}
	if o.Pin != "" {
		if err := imagetrust.VerifyPinned(ctx, o.Ref, o.Pin, o.Transfer.RemoteOptions); err != nil {
			return nil, fail(StepVerify, err)
		}
	}
	f := &Fetched{ref: o.Ref, pin: o.Pin, st: st, spec: o.Container}
	if f.name, f.Pulled, err = o.find(ctx, st); err != nil {
		return nil, err
	}
	if f.Image, err = f.load(ctx); err != nil {
		return nil, fail(StepRead, err)
	}
	if o.Container {
		if err := containerKind(o.Ref, f.Image.Kind()); err != nil {
			return nil, fail(StepKind, err)
		}
	}
	if o.Check != nil {
		if err := o.Check(ctx, f.Image); err != nil {
			return nil, fail(StepCheck, err)
		}
	}
	return f, nil
}

// open opens the store, the caller's way when it has one.
func (o FetchOptions) open(ctx context.Context) (*ociimage.Store, error) {
	if o.Open != nil {
		return o.Open(ctx)
	}
	st, err := ociimage.OpenStore(ctx, o.Store)
	if err != nil {
		return nil, err
	}
	st.Records = o.Records
	return st, nil
}

// find makes the image present in the store and returns the name it has
// there, and whether it was pulled.
func (o FetchOptions) find(ctx context.Context, st *ociimage.Store) (string, bool, error) {
	switch o.Pull {
	case PullNever:
		return o.Ref, false, nil // LoadImage says when it is not there
	case PullMissing:
		if name, ok := stored(ctx, st, o.Ref, o.Pin); ok {
			return name, false, nil
		}
	}
	if err := o.checkRemote(ctx); err != nil {
		return "", false, err
	}
	if err := o.pull(ctx, st); err != nil {
		return "", true, fail(StepPull, err)
	}
	return o.Ref, true, nil
}

// checkRemote runs Check on the registry's manifest, before the pull.
func (o FetchOptions) checkRemote(ctx context.Context) error {
	if o.Check == nil {
		return nil
	}
	remote, err := ociimage.RemoteImage(ctx, o.Ref, o.Transfer.RemoteOptions)
	if err != nil {
		return fail(StepPull, err)
	}
	if err := o.Check(ctx, remote); err != nil {
		return fail(StepCheck, err)
	}
	return nil
}

// pull pulls the image, and refuses what is not the pinned digest.
func (o FetchOptions) pull(ctx context.Context, st *ociimage.Store) error {
	d, err := st.Pull(ctx, o.Ref, o.Transfer)
	if err != nil {
		return err
	}
	if o.Pin != "" && d.Digest != o.Pin {
		return fmt.Errorf("the registry sent %s for %s: %w", d.Digest, o.Ref, ErrDigestMismatch)
	}
	return nil
}

// stored finds the pinned image in the store: a stored copy is used only
// when it is the pinned digest, under the pinned name or another name of
// the same repository (a tag pulled or built on the node), whoever put it
// there: the policy has allowed this namespace that repository. A name of
// another repository never counts, even with the same digest: a namespace
// allowed its own repository must not reach another's image by naming its
// digest.
func stored(ctx context.Context, st *ociimage.Store, ref string, pin godigest.Digest) (string, bool) {
	if d, err := st.Resolve(ctx, ref); err == nil && d.Digest == pin {
		return ref, true
	}
	names, _ := st.List(ctx)
	repo := repositoryOf(ref)
	for _, name := range names {
		if repo == "" || repositoryOf(name) != repo {
			continue
		}
		if d, err := st.Resolve(ctx, name); err == nil && d.Digest == pin {
			return name, true
		}
	}
	return "", false
}

// repositoryOf is host[:port]/name of a reference; "" when it is none.
func repositoryOf(ref string) string {
	r, err := registry.ParseReference(ref)
	if err != nil {
		return ""
	}
	return r.Registry + "/" + r.Repository
}

// load reads the image's manifest and config from the store, and checks
// it against the pin.
func (f *Fetched) load(ctx context.Context) (*ociimage.Image, error) {
	im, err := f.st.LoadImage(ctx, f.name)
	if err != nil {
		return nil, err
	}
	return im, f.checkPin(im)
}

// checkPin refuses an image that is not the pinned one.
func (f *Fetched) checkPin(im *ociimage.Image) error {
	if f.pin != "" && im.Desc.Digest != f.pin {
		return fmt.Errorf("the image store holds %s under %s: %w", im.Desc.Digest, f.ref, ErrDigestMismatch)
	}
	return nil
}

// containerKind refuses a checkpoint of a bare process tree: it has no
// container spec or rootfs to restore into a container.
func containerKind(ref string, k ociimage.Kind) error {
	if k == ociimage.KindProcess {
		return fmt.Errorf("%s is a checkpoint of a bare process tree (kind %q), not of a container: %w", ref, k, ErrNotContainerCheckpoint)
	}
	return nil
}
