package shim

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	versionapi "github.com/containerd/containerd/api/services/version/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// SpecNonceAnnotation is set on a container's spec, on containerd 1.x only,
// at task creation and after every checkpoint. Why:
//
// containerd 1.x stores a checkpoint's spec as a content blob, and its
// tasks service fails the whole Checkpoint call with "already exists" when
// that blob is already stored, which it is from any earlier checkpoint of
// the same container (the spec has not changed), or from the checkpoint a
// restored container came from. The 1.x client (`ctr container checkpoint`)
// ignores "already exists" errors, so it then writes an image without the
// CRIU data, and the restore fails with "media type not found". A spec that
// differs at every checkpoint makes every spec blob new. containerd 2.0
// ignores an existing blob, so nothing is done there.
const SpecNonceAnnotation = "io.cryo.checkpoint.spec-nonce"

// legacyDaemon talks back to containerd over its gRPC socket, lazily, to
// learn its version and to update container specs.
type legacyDaemon struct {
	address string

	once   sync.Once
	conn   *grpc.ClientConn
	legacy bool // containerd < 2.0
	err    error
}

func newLegacyDaemon(address string) *legacyDaemon {
	return &legacyDaemon{address: address}
}

// connection is the gRPC connection to containerd, once it answered.
func (l *legacyDaemon) connection(ctx context.Context) (*grpc.ClientConn, error) {
	if _, err := l.isLegacy(ctx); err != nil {
		return nil, err
	}
	return l.conn, nil
}

// isLegacy reports whether the daemon is containerd 1.x.
func (l *legacyDaemon) isLegacy(ctx context.Context) (bool, error) {
	l.once.Do(func() { l.legacy, l.err = l.probe(ctx) })
	return l.legacy, l.err
}

func (l *legacyDaemon) probe(ctx context.Context) (bool, error) {
	if l.address == "" {
		return false, fmt.Errorf("containerd's gRPC address is unknown")
	}
	addr := l.address
	if !strings.Contains(addr, "://") {
		addr = "unix://" + addr
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, err
	}
	l.conn = conn
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := versionapi.NewVersionClient(conn).Version(ctx, &emptypb.Empty{})
	if err != nil {
		return false, fmt.Errorf("containerd version: %w", err)
	}
	return majorVersion(v.Version) < 2, nil
}

// majorVersion reads "v1.7.24", "1.7.24~ds1" and the like.
func majorVersion(v string) int {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, ".-~+"); i >= 0 {
		v = v[:i]
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return n
}

// renewSpec gives container id's spec a fresh nonce on containerd 1.x.
// Failures are logged, not returned: the task itself is fine.
func (l *legacyDaemon) renewSpec(ctx context.Context, id string) {
	legacy, err := l.isLegacy(ctx)
	if err == nil && !legacy {
		return
	}
	if err == nil {
		err = l.setNonce(ctx, id)
	}
	if err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: could not renew the container's spec nonce; " +
			"on containerd 1.x a repeated `ctr container checkpoint` may then lose its CRIU data (see docs/containerd.md)")
	}
}

func (l *legacyDaemon) setNonce(ctx context.Context, id string) error {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.WithoutCancel(ctx), "containerd-namespace", ns), 10*time.Second)
	defer cancel()
	cs := containersapi.NewContainersClient(l.conn)
	got, err := cs.Get(ctx, &containersapi.GetContainerRequest{ID: id})
	if err != nil {
		return err
	}
	c := got.Container
	if c.Spec == nil {
		return nil
	}
	if c.Spec.Value, err = withNonce(c.Spec.Value); err != nil {
		return err
	}
	_, err = cs.Update(ctx, &containersapi.UpdateContainerRequest{
		Container:  c,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"spec"}},
	})
	return err
}

// withNonce sets the nonce annotation in a JSON runtime spec, leaving every
// other field as it is.
func withNonce(spec []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(spec, &top); err != nil {
		return nil, fmt.Errorf("read container spec: %w", err)
	}
	ann := map[string]string{}
	if raw, ok := top["annotations"]; ok {
		if err := json.Unmarshal(raw, &ann); err != nil {
			return nil, fmt.Errorf("read spec annotations: %w", err)
		}
	}
	ann[SpecNonceAnnotation] = strconv.FormatInt(time.Now().UnixNano(), 36)
	raw, err := json.Marshal(ann)
	if err != nil {
		return nil, err
	}
	top["annotations"] = raw
	return json.Marshal(top)
}
