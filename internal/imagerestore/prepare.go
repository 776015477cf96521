package imagerestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/imagetrust"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
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
}

// OptionsFrom takes the image store, the work directory base, the node's
// registry auth files and its annotation restore policy from cfg. The
// policy file is read at every call, so that a change applies to the
// next restore.
func OptionsFrom(cfg config.Config) Options {
	o := Options{Store: cfg.ImageStore, RestoreDir: cfg.RestoreDir, Records: digest.RecordsFrom(cfg), AuthFiles: cfg.AuthFiles}
	o.Policy, o.PolicyErr = config.LoadAnnotationPolicy(cfg.AnnotationRestore)
	return o
}

// Prepared is a checkpoint image unpacked and verified in a private work
// directory, ready for a restore. Remove it once the restore has run: it
// holds the processes' memory.
type Prepared struct {
	Ref    string // canonical, pinned by digest
	Kind   ociimage.Kind
	Digest string
	Pulled bool   // false when the image was found in the local store
	Dir    string // the work directory (0700)
	// Source is how the node's policy allowed the image (zero for a
	// checkpoint that did not come through Authorize).
	Source Source
	name   string // the name it has in the store
}

// CRIUDir is the CRIU image directory to restore from.
func (p *Prepared) CRIUDir() string { return ociimage.CRIUDir(p.Dir) }

// Remove deletes the work directory.
func (p *Prepared) Remove() error {
	if p == nil || p.Dir == "" {
		return nil
	}
	return os.RemoveAll(p.Dir)
}

// Prepare checks req against the node's policy (Authorize), finds the
// pinned image in the local store or pulls it, checks that it is the
// pinned image and a container checkpoint, and unpacks it verified (every
// layer against its digest, every CRIU file against cryo's manifest) into
// a new work directory under o.RestoreDir. id names the container in
// errors; each error is a *report.StepError naming the step and a
// remedy.
func Prepare(ctx context.Context, req Request, id string, o Options) (*Prepared, error) {
	src, err := Authorize(req, id, o)
	if err != nil {
		return nil, err
	}
	st, err := ociimage.OpenStore(ctx, o.Store)
	if err != nil {
		return nil, stepError(id, "open cryo's image store", err, "check "+config.EnvImageStore+" in containerd's environment")
	}
	st.Records = o.Records
	p := &Prepared{Source: src, Ref: src.Ref, Digest: src.Digest.String()}
	ref := src.Ref
	if err := imagetrust.VerifyPinned(ctx, ref, src.Digest, src.Remote); err != nil {
		return nil, stepError(id, "verify the signature of the checkpoint image "+ref, err, "")
	}
	if p.name, p.Pulled, err = fetch(ctx, st, src, o.Attempts); err != nil {
		return nil, stepError(id, "pull the checkpoint image "+ref, err, pullRemedy(err, src))
	}
	im, err := st.LoadImage(ctx, p.name)
	if err == nil {
		err = src.check(im)
	}
	if err != nil {
		return nil, stepError(id, "read the checkpoint image "+ref, err, "")
	}
	p.Kind = im.Kind()
	if err := containerKind(ref, im.Kind()); err != nil {
		return nil, stepError(id, "check the checkpoint image "+ref, err,
			"name an image built from a container checkpoint (`cryo image build --containerd`, a Podman or kubelet checkpoint)")
	}
	if err := p.unpack(ctx, st, id, o.RestoreDir); err != nil {
		return nil, err
	}
	return p, nil
}

// unpack makes the work directory and unpacks the image into it, then
// checks that what was unpacked is still the pinned image: the store is
// shared, and its name could have been moved between the check and the
// unpack.
func (p *Prepared) unpack(ctx context.Context, st *ociimage.Store, id, base string) error {
	var err error
	if p.Dir, err = NewWorkDir(base); err != nil {
		return stepError(id, "make a work directory", err, "check "+config.EnvRestoreDir+" ("+base+") and its free space")
	}
	im, err := st.Unpack(ctx, p.name, p.Dir, nil)
	if err == nil {
		err = p.Source.check(im)
	}
	if err != nil {
		p.Remove()
		return stepError(id, "unpack the checkpoint image "+p.Ref, err, "")
	}
	if _, err := os.Stat(filepath.Join(p.Dir, specDumpName)); err != nil {
		p.Remove()
		return stepError(id, "check the checkpoint image "+p.Ref, fmt.Errorf("%s holds no %s: %w", p.Ref, specDumpName, ErrNotContainerCheckpoint),
			"name an image built from a container checkpoint")
	}
	return nil
}

// specDumpName is the container's spec that every container checkpoint
// carries (Podman, CRI, cryo's containerd kind); a bare process tree's has
// none.
const specDumpName = ociimage.SpecDumpName

// fetch makes the pinned image present in the store and returns the name
// it has there. A stored copy is used only when it is the pinned digest,
// under the pinned name or another name of the same repository (a tag
// pulled or built on the node), whoever put it there: the policy has
// allowed this namespace that repository. Anything else is pulled,
// skipping the blobs the store has, and checked against the pin.
func fetch(ctx context.Context, st *ociimage.Store, src Source, attempts int) (string, bool, error) {
	if name, ok := stored(ctx, st, src); ok {
		return name, false, nil
	}
	d, err := st.Pull(ctx, src.Ref, ociimage.TransferOptions{RemoteOptions: src.Remote, Attempts: attempts})
	if err != nil {
		return "", false, notFound(err)
	}
	if d.Digest != src.Digest {
		return "", true, fmt.Errorf("the registry sent %s for %s: %w", d.Digest, src.Ref, ErrDigestMismatch)
	}
	return src.Ref, true, nil
}

// stored finds the pinned image in the store. A name of another
// repository never counts, even with the same digest: a namespace allowed
// its own repository must not reach another's image by naming its digest.
func stored(ctx context.Context, st *ociimage.Store, src Source) (string, bool) {
	if d, err := st.Resolve(ctx, src.Ref); err == nil && d.Digest == src.Digest {
		return src.Ref, true
	}
	names, _ := st.List(ctx)
	for _, name := range names {
		r, err := registry.ParseReference(name)
		if err != nil || r.Registry+"/"+r.Repository != src.repository() {
			continue
		}
		if d, err := st.Resolve(ctx, name); err == nil && d.Digest == src.Digest {
			return name, true
		}
	}
	return "", false
}

// check refuses an image that is not the pinned one.
func (s Source) check(im *ociimage.Image) error {
	if im.Desc.Digest != s.Digest {
		return fmt.Errorf("the image store holds %s under %s: %w", im.Desc.Digest, s.Ref, ErrDigestMismatch)
	}
	return nil
}

// notFound marks the registry's "no such image" with ErrImageNotFound,
// inside the store's report so that stepError keeps it.
func notFound(err error) error {
	var se *report.StepError
	if !errors.Is(err, errdef.ErrNotFound) || !errors.As(err, &se) {
		return err
	}
	marked := *se
	marked.Err = fmt.Errorf("%w: %w", se.Err, ErrImageNotFound)
	return &marked
}

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

// containerKind refuses a checkpoint of a bare process tree: it has no
// container spec or rootfs to restore into a container.
func containerKind(ref string, k ociimage.Kind) error {
	if k == ociimage.KindProcess {
		return fmt.Errorf("%s is a checkpoint of a bare process tree (kind %q), not of a container: %w", ref, k, ErrNotContainerCheckpoint)
	}
	return nil
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
