package shim

import (
	"context"
	"fmt"
	"strings"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// containerd 1.7's client gives runc.v2's options only to runtimes named
// io.containerd.runc*; to any other runtime, cryo's included, its
// checkpoint and restore options (client.WithCheckpointImagePath,
// WithRestoreImagePath, …) go out as the options of its old "linux"
// runtime, package containerd.linux.runc. containerd 2 no longer knows
// those types, and the runc task service cryo decorates refuses them, so
// the shim rewrites them into runc.v2's own, field by field: the two
// messages do not share a layout (the old CheckpointOptions has work_path
// and image_path the other way round).
const (
	legacyCreateOptions     = "containerd.linux.runc.CreateOptions"
	legacyCheckpointOptions = "containerd.linux.runc.CheckpointOptions"
)

// legacyType is the old message a type URL names, or "".
func legacyType(a *anypb.Any) string {
	if a == nil {
		return ""
	}
	name := a.GetTypeUrl()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if name == legacyCreateOptions || name == legacyCheckpointOptions {
		return name
	}
	return ""
}

// upgradeCheckpointOptions rewrites containerd 1.7's old checkpoint
// options into runc.v2's CheckpointOptions.
func upgradeCheckpointOptions(ctx context.Context, r *taskv3.CheckpointTaskRequest) error {
	if legacyType(r.Options) != legacyCheckpointOptions {
		return nil
	}
	var o options.CheckpointOptions
	err := eachField(r.Options.GetValue(), func(f field) {
		switch f.num {
		case 1:
			o.Exit = f.bool()
		case 2:
			o.OpenTcp = f.bool()
		case 3:
			o.ExternalUnixSockets = f.bool()
		case 4:
			o.Terminal = f.bool()
		case 5:
			o.FileLocks = f.bool()
		case 6:
			o.EmptyNamespaces = append(o.EmptyNamespaces, f.str())
		case 7:
			o.CgroupsMode = f.str()
		case 8:
			o.WorkPath = f.str()
		case 9:
			o.ImagePath = f.str()
		}
	})
	if err != nil {
		return fmt.Errorf("decode %s: %w", legacyCheckpointOptions, err)
	}
	log.G(ctx).WithField("id", r.ID).Debug("cryo: checkpoint options of containerd 1.7's client (containerd.linux.runc) read as runc.v2's")
	return setOptions(&r.Options, &o)
}

// upgradeCreateOptions rewrites containerd 1.7's old create options into
// runc.v2's Options. The old restore flags (open_tcp, terminal, …) have no
// place there: runc.v2 restores with what the checkpoint recorded.
func upgradeCreateOptions(ctx context.Context, r *taskv3.CreateTaskRequest) error {
	if legacyType(r.Options) != legacyCreateOptions {
		return nil
	}
	var o options.Options
	err := eachField(r.Options.GetValue(), func(f field) {
		switch f.num {
		case 1:
			o.NoPivotRoot = f.bool()
		case 8:
			o.NoNewKeyring = f.bool()
		case 9:
			o.ShimCgroup = f.str()
		case 10:
			o.IoUid = uint32(f.n)
		case 11:
			o.IoGid = uint32(f.n)
		case 12:
			o.CriuWorkPath = f.str()
		case 13:
			o.CriuImagePath = f.str()
		}
	})
	if err != nil {
		return fmt.Errorf("decode %s: %w", legacyCreateOptions, err)
	}
	log.G(ctx).WithField("id", r.ID).Debug("cryo: create options of containerd 1.7's client (containerd.linux.runc) read as runc.v2's")
	return setOptions(&r.Options, &o)
}

func setOptions(dst **anypb.Any, m any) error {
	a, err := typeurl.MarshalAny(m)
	if err != nil {
		return err
	}
	*dst = &anypb.Any{TypeUrl: a.GetTypeUrl(), Value: a.GetValue()}
	return nil
}

// field is one decoded protobuf field: a varint (n) or a length-delimited
// value (b).
type field struct {
	num protowire.Number
	n   uint64
	b   []byte
}

func (f field) bool() bool  { return f.n != 0 }
func (f field) str() string { return string(f.b) }

// eachField calls fn for every varint and length-delimited field of b, in
// order, and skips the others.
func eachField(b []byte, fn func(field)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		f := field{num: num}
		switch typ {
		case protowire.VarintType:
			f.n, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.VarintType || typ == protowire.BytesType {
			fn(f)
		}
	}
	return nil
}
