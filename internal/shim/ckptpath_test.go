package shim

import (
	"context"
	"path/filepath"
	"testing"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"
)

func withImagePath(t *testing.T, r *taskv3.CreateTaskRequest, path string) *taskv3.CreateTaskRequest {
	a, err := typeurl.MarshalAny(&options.Options{CriuImagePath: path})
	if err != nil {
		t.Fatal(err)
	}
	r.Options = &anypb.Any{TypeUrl: a.GetTypeUrl(), Value: a.GetValue()}
	return r
}

// containerd 1.7 passes CriuImagePath to a runtime not named runc but no
// checkpoint: the shim restores from the option; a checkpoint containerd
// did pass wins.
func TestRestoreFromImagePath(t *testing.T) {
	r := withImagePath(t, &taskv3.CreateTaskRequest{ID: "a"}, "/ckpt/dir")
	restoreFromImagePath(context.Background(), r)
	if r.Checkpoint != "/ckpt/dir" {
		t.Errorf("checkpoint = %q, want the option's /ckpt/dir", r.Checkpoint)
	}
	r = withImagePath(t, &taskv3.CreateTaskRequest{ID: "b", Checkpoint: "/given"}, "/ckpt/dir")
	restoreFromImagePath(context.Background(), r)
	if r.Checkpoint != "/given" {
		t.Errorf("checkpoint = %q, want containerd's /given", r.Checkpoint)
	}
	r = &taskv3.CreateTaskRequest{ID: "c"}
	restoreFromImagePath(context.Background(), r)
	if r.Checkpoint != "" {
		t.Errorf("checkpoint = %q without the option, want none", r.Checkpoint)
	}
}

// Only containerd's own unpacked copy is removed, never a directory the
// caller named.
func TestContainerdCopy(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", tmp)
	mine := filepath.Join(tmp, "ctrd-checkpoint123")
	cases := []struct {
		r    *taskv3.CreateTaskRequest
		want string
	}{
		{&taskv3.CreateTaskRequest{Checkpoint: mine}, mine},
		{withImagePath(t, &taskv3.CreateTaskRequest{Checkpoint: mine}, mine), ""}, // the caller's, however named
		{&taskv3.CreateTaskRequest{Checkpoint: filepath.Join(tmp, "other")}, ""},
		{&taskv3.CreateTaskRequest{Checkpoint: filepath.Join(tmp, "sub", "ctrd-checkpoint1")}, ""},
		{&taskv3.CreateTaskRequest{Checkpoint: "/elsewhere/ctrd-checkpoint1"}, ""},
		{&taskv3.CreateTaskRequest{}, ""},
	}
	for i, c := range cases {
		if got := containerdCopy(c.r); got != c.want {
			t.Errorf("case %d (%q): containerdCopy = %q, want %q", i, c.r.Checkpoint, got, c.want)
		}
	}
}
