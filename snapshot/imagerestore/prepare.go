package imagerestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"

	"github.com/cryo-gpu/cryo/config"
	"github.com/cryo-gpu/cryo/snapshot"
	"github.com/cryo-gpu/cryo/snapshot/digest"
	"github.com/cryo-gpu/cryo/snapshot/ociimage"
)

// Options is what Prepare needs of the node, from the entry point's
// config.Config (see OptionsFrom).
type Options struct {
	Store      string // cryo's local image store
	RestoreDir string // where work directories are made
	Records    digest.Records
	Remote     ociimage.RemoteOptions
	Attempts   int // whole-pull attempts; 0: the store's default
}

// OptionsFrom takes the image store, the work directory base and the
// node's registry auth files from cfg.
func OptionsFrom(cfg config.Config) Options {
	return Options{Store: cfg.ImageStore, RestoreDir: cfg.RestoreDir, Records: digest.RecordsFrom(cfg), Remote: ociimage.RemoteOptions{AuthFiles: cfg.AuthFiles}}
}

// Prepared is a checkpoint image unpacked and verified in a private work
// directory, ready for a restore. Remove it once the restore has run: it
// holds the processes' memory.
type Prepared struct {
	Ref    string
	Kind   ociimage.Kind
	Digest string
	Pulled bool   // false when the image was found in the local store
	Dir    string // the work directory (0700)
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

// Prepare finds or pulls ref, checks that it is a container checkpoint,
// and unpacks it verified (every layer against its digest, every CRIU file
// against cryo's manifest) into a new work directory under
// o.RestoreDir. id names the container in errors; each error is a
// *snapshot.StepError naming the step and a remedy.
func Prepare(ctx context.Context, ref, id string, o Options) (*Prepared, error) {
	st, err := ociimage.OpenStore(ctx, o.Store)
	if err != nil {
		return nil, stepError(id, "open cryo's image store", err, "check "+config.EnvImageStore+" in containerd's environment")
	}
	st.Records = o.Records
	p := &Prepared{Ref: ref}
	if p.Pulled, err = fetch(ctx, st, ref, o); err != nil {
		return nil, stepError(id, "pull the checkpoint image "+ref, err, pullRemedy(err))
	}
	im, err := st.LoadImage(ctx, ref)
	if err != nil {
		return nil, stepError(id, "read the checkpoint image "+ref, err, "")
	}
	p.Kind, p.Digest = im.Kind(), im.Desc.Digest.String()
	if err := containerKind(ref, im.Kind()); err != nil {
		return nil, stepError(id, "check the checkpoint image "+ref, err,
			"name an image built from a container checkpoint (`cryo image build --containerd`, a Podman or kubelet checkpoint)")
	}
	if p.Dir, err = NewWorkDir(o.RestoreDir); err != nil {
		return nil, stepError(id, "make a work directory", err, "check "+config.EnvRestoreDir+" ("+o.RestoreDir+") and its free space")
	}
	if _, err := st.Unpack(ctx, ref, p.Dir, nil); err != nil {
		p.Remove()
		return nil, stepError(id, "unpack the checkpoint image "+ref, err, "")
	}
	if _, err := os.Stat(filepath.Join(p.Dir, specDumpName)); err != nil {
		p.Remove()
		return nil, stepError(id, "check the checkpoint image "+ref, fmt.Errorf("%s holds no %s: %w", ref, specDumpName, ErrNotContainerCheckpoint),
			"name an image built from a container checkpoint")
	}
	return p, nil
}

// specDumpName is the container's spec that every container checkpoint
// carries (Podman, CRI, cryo's containerd kind); a bare process tree's has
// none.
const specDumpName = ociimage.SpecDumpName

// fetch makes ref present in the store, as a node treats a container image
// with the default pull policy: a digest-pinned reference or a tag other
// than "latest" that the store already has is used as it is; anything else
// is pulled (blobs the store has are not sent again).
func fetch(ctx context.Context, st *ociimage.Store, ref string, o Options) (bool, error) {
	if _, err := st.Resolve(ctx, ref); err == nil && pinned(ref) {
		return false, nil
	}
	_, err := st.Pull(ctx, ref, ociimage.TransferOptions{RemoteOptions: o.Remote, Attempts: o.Attempts})
	return err == nil, notFound(err)
}

// notFound marks the registry's "no such image" with ErrImageNotFound,
// inside the store's report so that stepError keeps it.
func notFound(err error) error {
	var se *snapshot.StepError
	if !errors.Is(err, errdef.ErrNotFound) || !errors.As(err, &se) {
		return err
	}
	marked := *se
	marked.Err = fmt.Errorf("%w: %w", se.Err, ErrImageNotFound)
	return &marked
}

// pullRemedy: damaged data is the image's fault, anything else the
// reference's, the registry's or the node's credentials'.
func pullRemedy(err error) string {
	if errors.Is(err, ociimage.ErrIntegrity) {
		return "" // the store's own: push the image again
	}
	return "check the reference, and that the node reaches the registry with its credentials (REGISTRY_AUTH_FILE in containerd's environment names the node's auth file)"
}

// pinned: the reference names a digest, or a tag other than latest.
func pinned(ref string) bool {
	r, err := registry.ParseReference(ref)
	if err != nil {
		return false
	}
	return r.Reference != "" && r.Reference != "latest"
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
	var inner *snapshot.StepError
	if errors.As(err, &inner) {
		cause := *inner
		if remedy == "" {
			remedy = inner.Remedy
		}
		cause.Remedy = ""
		err = &cause
	}
	return &snapshot.StepError{Op: "restore", ID: id, Step: step, Err: err, Outcome: "nothing was restored", Remedy: remedy}
}
