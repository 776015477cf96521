package harness

import (
	"context"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
)

// gpusFile is the daemon's CRYO_FAKE_GPUS_FILE: what the fake NVML of the
// shims reports, changed by a test for the time it runs.
// A test that set CRYO_FAKE_GPUS_FILE itself before starting the daemon
// keeps its own.
func (d *Daemon) GpusFile() string {
	if f := os.Getenv("CRYO_FAKE_GPUS_FILE"); f != "" {
		return f
	}
	return filepath.Join(d.Dir, "gpus")
}

// fakeGPUs makes the daemon's host the fake host h until the test ends.
func (d *Daemon) FakeGPUs(h fakeHost) {
	if err := os.WriteFile(d.GpusFile(), []byte(h.GPUs), 0o644); err != nil {
		d.T.Fatal(err)
	}
	d.T.Cleanup(func() { os.Remove(d.GpusFile()) })
}

// WithGPUs gives a container the stand-in nodes of host's GPUs gpus, the
// device-cgroup rule for them, and the host's GPU table for the fake app.
func WithGPUs(h fakeHost, gpus ...int) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		GiveStandIns(s, gpus...)
		s.Process.Env = append(s.Process.Env, "CRYO_FAKE_GPUS="+h.GPUs)
		return nil
	}
}

// newFakeGPUContainer creates a container of the test image given GPUs gpus.
func (d *Daemon) NewFakeGPUContainer(id string, h fakeHost, gpus ...int) client.Container {
	d.T.Helper()
	ctx := NamespacedCtx()
	img, err := d.Client.GetImage(ctx, TestImage)
	if err != nil {
		d.T.Fatal(err)
	}
	c, err := d.Client.NewContainer(ctx, id,
		client.WithImage(img), client.WithNewSnapshot(id+"-snap", img), client.WithRuntime(CryoRuntime, nil),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("/bin/fakecuda-app", "100"), WithGPUs(h, gpus...)))
	if err != nil {
		d.T.Fatalf("new container %s: %v", id, err)
	}
	return c
}

// assertGPUs checks that a task's init runs on the GPUs want of h.
func (d *Daemon) AssertGPUs(id string, h fakeHost, want ...int) {
	d.T.Helper()
	assertRunsOn(d.T, int(d.Task(id).Pid()), h, want...)
}
