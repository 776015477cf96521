// Package ctrd is cryo as a containerd client: it opens a checkpoint that
// containerd holds (made by `ctr task checkpoint` or `ctr container
// checkpoint --task`) so that internal/ociimage can build an image of it,
// and it restores an unpacked containerd checkpoint into containerd as a
// new container, on cryo's runtime, whose shim resumes CUDA.
//
// The formats (the checkpoint index, config.dump, spec.dump) are
// internal/ociimage's; this package only moves them in and out of the daemon.
package ctrd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/cryo-gpu/cryo/internal/report"
)

// CryoRuntime is cryo's containerd runtime type.
const CryoRuntime = "io.containerd.cryo.v2"

// Sentinel errors; concrete errors wrap them.
var (
	// ErrBaseImage: the image the container was created from is not on this node.
	ErrBaseImage = errors.New("base image missing")
	// ErrNoGPU: a GPU asked for by --gpus is not one of this host's.
	ErrNoGPU = errors.New("no such GPU on this host")
	// ErrMount: a --mount that cannot be read.
	ErrMount = errors.New("bad mount")
	// ErrMissingMount: the checkpoint needs a mount the new container lacks.
	ErrMissingMount = errors.New("mount missing")
	// ErrHostNetwork: the checkpointed container shared the host's
	// network namespace and the restore was not granted it.
	ErrHostNetwork = errors.New("host network not granted")
)

// Options says which containerd to talk to.
type Options struct {
	Address   string // the daemon's socket
	Namespace string
}

// dial connects to containerd and returns a context in its namespace.
func (o Options) dial(ctx context.Context) (*client.Client, context.Context, error) {
	c, err := client.New(o.Address, client.WithDefaultNamespace(o.Namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, ctx, report.WithRemedy(fmt.Errorf("connect to containerd at %s: %w", o.Address, err), "pass --address with the daemon's socket (and run as root)")
	}
	return c, namespaces.WithNamespace(ctx, o.Namespace), nil
}
