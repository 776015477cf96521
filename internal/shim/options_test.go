package shim

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/typeurl/v2"
)

func TestSystemdCgroupFromSpec(t *testing.T) {
	cases := []struct {
		path    string
		systemd bool
	}{
		{"kubepods-besteffort-pod1.slice:cri-containerd:abc", true},
		{":cri-containerd:abc", true},
		{"/cryo-test/app", false},
		{"cryo-test/app", false},
		{"", false},
	}
	for _, c := range cases {
		dir := t.TempDir()
		spec := `{"linux":{"cgroupsPath":"` + c.path + `"}}`
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		r := &taskv3.CreateTaskRequest{ID: "c", Bundle: dir}
		systemdCgroupFromSpec(context.Background(), r)
		if !c.systemd {
			if r.Options != nil {
				t.Errorf("%q: options set for a cgroupfs path", c.path)
			}
			continue
		}
		v, err := typeurl.UnmarshalAny(r.Options)
		o, ok := v.(*options.Options)
		if err != nil || !ok || !o.SystemdCgroup {
			t.Errorf("%q: options %v (%v), want SystemdCgroup", c.path, v, err)
		}
	}
}
