package shim

import (
	"context"
	"testing"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// legacyMessage encodes fields as containerd 1.7's client does for its old
// containerd.linux.runc types: strings and bools by field number.
func legacyMessage(fields map[protowire.Number]any) []byte {
	var b []byte
	for num := protowire.Number(1); num <= 13; num++ {
		switch v := fields[num].(type) {
		case string:
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendString(b, v)
		case bool:
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, protowire.EncodeBool(v))
		case uint32:
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(v))
		}
	}
	return b
}

func TestUpgradeCheckpointOptions(t *testing.T) {
	// The old message has work_path at 8 and image_path at 9, runc.v2's
	// the other way round: read as runc.v2's, they would swap.
	r := &taskv3.CheckpointTaskRequest{ID: "app", Options: &anypb.Any{
		TypeUrl: legacyCheckpointOptions,
		Value:   legacyMessage(map[protowire.Number]any{1: true, 2: true, 7: "soft", 8: "/work", 9: "/images"}),
	}}
	if err := upgradeCheckpointOptions(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	var o options.CheckpointOptions
	if err := typeurl.UnmarshalTo(r.Options, &o); err != nil {
		t.Fatalf("the rewritten options are not runc.v2's: %v", err)
	}
	if !o.Exit || !o.OpenTcp || o.CgroupsMode != "soft" || o.WorkPath != "/work" || o.ImagePath != "/images" {
		t.Fatalf("rewritten options: %+v", &o)
	}
}

func TestUpgradeCreateOptions(t *testing.T) {
	r := &taskv3.CreateTaskRequest{ID: "app", Options: &anypb.Any{
		TypeUrl: "type.googleapis.com/" + legacyCreateOptions,
		Value:   legacyMessage(map[protowire.Number]any{1: true, 2: true, 9: "/shim", 10: uint32(7), 11: uint32(8), 12: "/work", 13: "/images"}),
	}}
	if err := upgradeCreateOptions(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	var o options.Options
	if err := typeurl.UnmarshalTo(r.Options, &o); err != nil {
		t.Fatalf("the rewritten options are not runc.v2's: %v", err)
	}
	if !o.NoPivotRoot || o.ShimCgroup != "/shim" || o.IoUid != 7 || o.IoGid != 8 || o.CriuWorkPath != "/work" || o.CriuImagePath != "/images" {
		t.Fatalf("rewritten options: %+v", &o)
	}
}

func TestUpgradeLeavesOtherOptions(t *testing.T) {
	a, err := typeurl.MarshalAny(&options.CheckpointOptions{ImagePath: "/images"})
	if err != nil {
		t.Fatal(err)
	}
	r := &taskv3.CheckpointTaskRequest{Options: &anypb.Any{TypeUrl: a.GetTypeUrl(), Value: a.GetValue()}}
	if err := upgradeCheckpointOptions(context.Background(), r); err != nil || r.Options.GetTypeUrl() != a.GetTypeUrl() {
		t.Fatalf("runc.v2's own options changed: %v, %s", err, r.Options.GetTypeUrl())
	}
	bad := &taskv3.CheckpointTaskRequest{Options: &anypb.Any{TypeUrl: legacyCheckpointOptions, Value: []byte{0x0a, 0x10}}}
	if err := upgradeCheckpointOptions(context.Background(), bad); err == nil {
		t.Fatal("a truncated message was accepted")
	}
}
