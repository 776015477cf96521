package ctrd

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrNameInUse: a container of the restored one's name exists already.
// It is the pre-check's sentinel, refused as Podman's name in use is: a
// pre-check refusal of the invocation, exit 2, whichever runtime holds it.
var ErrNameInUse = precheck.ErrNameInUse

// PrecheckOptions are what a restore can check before the checkpoint is
// unpacked: an image's annotations name the container and its base image.
type PrecheckOptions struct {
	Options
	Name      string // the restored container's id; "" skips the check
	BaseImage string // the base image's reference; "" skips the check
	GPUs      []string
	Inventory Inventory
	Log       func(string, ...any) // what it removed (nameFree); nil: silent
}

// Precheck refuses, before an image of many gigabytes is unpacked and
// hashed, a restore that Restore would refuse anyway: --gpus naming a GPU
// this host lacks, a container name in use, a base image missing from the
// namespace. Restore checks all of it again from the verified checkpoint.
func Precheck(ctx context.Context, o PrecheckOptions) error {
	if len(o.GPUs) > 0 {
		if _, err := ResolveGPUs(ctx, o.GPUs, o.Inventory); err != nil {
			return fmt.Errorf("restore container %s: give it GPUs: %w", o.Name, err)
		}
	}
	c, ctx, err := o.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := nameFree(ctx, c, o.Options, o.Name, o.Log); err != nil {
		return err
	}
	if o.BaseImage == "" {
		return nil
	}
	if _, err := c.GetImage(ctx, o.BaseImage); errdefs.IsNotFound(err) {
		return missingBaseImage(o.Options, o.BaseImage)
	} else if err != nil {
		return fmt.Errorf("base image %s: %w", o.BaseImage, err)
	}
	return nil
}

// nameFree refuses a name that a container of the namespace has, but
// for one that a killed restore left before its task ran
// (removeAbandoned): it is removed, and said so on logf.
func nameFree(ctx context.Context, c *client.Client, o Options, name string, logf func(string, ...any)) error {
	if name == "" {
		return nil
	}
	if ctr, err := c.LoadContainer(ctx, name); err == nil {
		if pid, ok := removeAbandoned(ctx, ctr); ok {
			if logf != nil {
				logf("removed container %s, left by a restore whose cryo (pid %s) was killed before its task ran", name, pid)
			}
			return nil
		}
		return &precheck.Error{Err: ErrNameInUse, Detail: fmt.Sprintf("container %s already exists in containerd namespace %q", name, o.Namespace),
			Remedy: fmt.Sprintf("pass --name NEW, or remove it (ctr -n %s container rm %s)", o.Namespace, name)}
	}
	return nil
}

func missingBaseImage(o Options, ref string) error {
	return report.WithRemedy(fmt.Errorf("the checkpoint's base image %s is not in containerd namespace %q at %s: %w", ref, o.Namespace, o.Address, ErrBaseImage), fmt.Sprintf("pull or import it there first (ctr -n %s image pull %s)", o.Namespace, ref))
}

// checkpointedName is the name of the container that was checkpointed.
// An image built by an older cryo may have named it after the last part
// of the checkpoint's reference (`ctr container checkpoint app ux-ck`
// gave "ux-ck") when containerd no longer held the container's record:
// then the id in cryo's manifest, which the shim wrote, is the name.
func checkpointedName(dir string, meta ociimage.ContainerdMeta) string {
	ref := meta.CheckpointImage
	fromRef := ref != "" && !ociimage.IsCtrCheckpointName(ref) && meta.ID == ociimage.CheckpointContainerID(ref)
	if m, err := manifest.Read(ociimage.CRIUDir(dir)); fromRef && err == nil && m.ContainerID != "" && !strings.HasPrefix(m.ContainerID, "pid ") {
		return m.ContainerID
	}
	return cmp.Or(meta.Name, meta.ID)
}
