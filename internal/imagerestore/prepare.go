package imagerestore

import (
	"context"
	"errors"
	"os"

	"oras.land/oras-go/v2/errdef"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Options is what Prepare needs of the node, from the entry point's
// config.Config (see OptionsFrom).
type Options struct {
	Store      string // cryo's local image store
	RestoreDir string // where work directories are made
	Records    digest.Records
	// Policy is the node's annotation restore policy; PolicyErr, when its
	// file could not be used (the path is then off).
	Policy    config.AnnotationPolicy
	PolicyErr error
	// AuthFiles are the node's registry auth files, used only for the
	// namespaces whose policy rule allows them.
	AuthFiles []string
	Attempts  int // whole-pull attempts; 0: the store's default
	// Limits bound the tars of the image (CRYO_UNPACK_MAX_*).
	Limits archive.Limits
}

// OptionsFrom takes the image store, the work directory base, the node's
// registry auth files and its annotation restore policy from cfg. The
// policy file is read at every call, so that a change applies to the
// next restore.
func OptionsFrom(cfg config.Config) Options {
	o := Options{Store: cfg.ImageStore, RestoreDir: cfg.RestoreDir, Records: digest.RecordsFrom(cfg), AuthFiles: cfg.AuthFiles, Limits: ociimage.LimitsFrom(cfg)}
	o.Policy, o.PolicyErr = config.LoadAnnotationPolicy(cfg.AnnotationRestore)
	return o
}

// Prepared is a checkpoint image unpacked and verified in a private work
// directory, ready for a restore. Remove it once the restore has run: it
// holds the processes' memory.
type Prepared struct {
	Ref    string // as named; a pod's: canonical, pinned by digest
	Kind   ociimage.Kind
	Digest string
	Pulled bool   // false when the image was found in the local store
	Dir    string // the work directory (0700)
	// Source is how the node's policy allowed the image (zero for a
	// checkpoint that did not come through Authorize).
	Source Source
	name   string         // the name it has in the store
	keep   bool           // the caller's directory: Remove leaves it
	limits archive.Limits // the bounds of its tars, for the rootfs diff
}

// CRIUDir is the CRIU image directory to restore from.
func (p *Prepared) CRIUDir() string { return ociimage.CRIUDir(p.Dir) }

// Remove deletes the work directory, unless it is the caller's
// (UnpackOptions.Dir).
func (p *Prepared) Remove() error {
	if p == nil || p.Dir == "" || p.keep {
		return nil
	}
	return os.RemoveAll(p.Dir)
}

// Prepare checks req against the node's policy (Authorize), then fetches
// the pinned image (its signature verified; found in the local store or
// pulled; checked to be the pinned image and a container checkpoint) and
// unpacks it verified (every layer against its digest, every CRIU file
// against cryo's manifest) into a new work directory under o.RestoreDir.
// id names the container in errors; each error is a *report.StepError
// naming the step and a remedy.
func Prepare(ctx context.Context, req Request, id string, o Options) (*Prepared, error) {
	src, err := Authorize(req, id, o)
	if err != nil {
		return nil, err
	}
	f, err := Fetch(ctx, FetchOptions{
		Ref: src.Ref, Pin: src.Digest, Pull: PullMissing, Container: true,
		Transfer: ociimage.TransferOptions{RemoteOptions: src.Remote, Attempts: o.Attempts},
		Store:    o.Store, Records: o.Records,
	})
	if err != nil {
		return nil, podError(id, src, o, err)
	}
	p, err := f.Unpack(ctx, UnpackOptions{Base: o.RestoreDir, Limits: o.Limits})
	if err != nil {
		return nil, podError(id, src, o, err)
	}
	p.Source = src
	return p, nil
}

// podError words a failed step of a pod's restore as the node's report:
// the step, and a remedy for the node's admin or the pod's author.
func podError(id string, src Source, o Options, err error) error {
	var f *Failure
	if !errors.As(err, &f) {
		f = &Failure{Err: err} // Fetch and Unpack fail only with a Failure
	}
	ref := src.Ref
	switch f.Step {
	case StepOpenStore:
		return stepError(id, "open cryo's image store", f.Err, "check "+config.EnvImageStore+" in containerd's environment")
	case StepVerify:
		return stepError(id, "verify the signature of the checkpoint image "+ref, f.Err, "")
	case StepPull:
		return stepError(id, "pull the checkpoint image "+ref, notFound(f.Err), pullRemedy(f.Err, src))
	case StepRead:
		return stepError(id, "read the checkpoint image "+ref, f.Err, "")
	case StepKind:
		return stepError(id, "check the checkpoint image "+ref, f.Err,
			"name an image built from a container checkpoint (`cryo image build --containerd`, a Podman or kubelet checkpoint)")
	case StepWorkDir:
		return stepError(id, "make a work directory", f.Err, "check "+config.EnvRestoreDir+" ("+o.RestoreDir+") and its free space")
	case StepUnpack:
		return stepError(id, "unpack the checkpoint image "+ref, f.Err, "")
	case StepContents:
		return stepError(id, "check the checkpoint image "+ref, f.Err, "name an image built from a container checkpoint")
	}
	return stepError(id, "check the checkpoint image "+ref, f.Err, "")
}

// notFound marks the registry's "no such image" with ErrImageNotFound,
// inside the store's report so that stepError keeps it.
func notFound(err error) error {
	var se *report.StepError
	if !errors.Is(err, errdef.ErrNotFound) || !errors.As(err, &se) {
		return err
	}
	marked := *se
	marked.Err = &imageNotFound{err: se.Err}
	return &marked
}

// imageNotFound is a pull's failure marked as the registry's "no such
// image". Its message is the failure's, then ErrImageNotFound's; its chain
// names ErrImageNotFound first, so that the class the shim reports is
// that one's (NotFound), not the transfer's (Unavailable) that the failure
// carries too.
type imageNotFound struct{ err error }

func (e *imageNotFound) Error() string   { return e.err.Error() + ": " + ErrImageNotFound.Error() }
func (e *imageNotFound) Unwrap() []error { return []error{ErrImageNotFound, e.err} }

// pullRemedy: damaged data is the image's fault; anything else the
// reference's, the registry's, or the way this namespace may reach it.
func pullRemedy(err error, src Source) string {
	if errors.Is(err, ociimage.ErrIntegrity) {
		return "" // the store's own: push the image again
	}
	how := "anonymously (the node's policy gives " + nsLabel(src.Namespace) + " no node credentials: the image must be public, or the admin sets use_node_credentials)"
	if src.NodeCredentials {
		how = "with the node's credentials (REGISTRY_AUTH_FILE in containerd's environment names the node's auth file)"
	}
	proto := "over HTTPS (a registry that speaks plain HTTP must be in the policy's insecure_registries)"
	if src.Remote.PlainHTTP {
		proto = "over plain HTTP (the policy lists it in insecure_registries)"
	}
	return "check the reference, and that the node reaches the registry " + how + ", " + proto
}

// stepError reports a failed step of the restore of container id. When err
// is already a StepError (the store's own report of a pull or unpack), its
// cause is kept and the remedy is the one given, else its own: the store's
// remedies speak of the CLI's flags, which a node's restore has not.
func stepError(id, step string, err error, remedy string) error {
	var inner *report.StepError
	if errors.As(err, &inner) {
		cause := *inner
		if remedy == "" {
			remedy = inner.Remedy
		}
		cause.Remedy = ""
		err = &cause
	}
	return &report.StepError{Op: "restore", ID: id, Step: step, Err: err, Outcome: "nothing was restored", Remedy: remedy}
}
