package gpu

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestScopeEnvGrantsNoGPU (F9): a pod author sets NVIDIA_VISIBLE_DEVICES
// in a container's environment; without a GPU node in its spec, and
// without the NVIDIA toolkit's hook that would act on the variable, the
// container has no GPU, so the restore of a GPU checkpoint into it is
// refused at the shim's check, naming the GPU, before CRIU runs and with no
// task left. The same checkpoint restores into a container whose spec
// names a GPU node (a stand-in), and the app goes on on that GPU.
func TestScopeEnvGrantsNoGPU(t *testing.T) {
	harness.RequireRoot(t)
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) {
			d := harness.NewDaemon(t, v, false)
			criu := harness.NewLoggingCRIU(t)
			d.CRIU = &criu
			d.Start()
			d.ImportTestImage()
			testEnvGrantsNoGPU(d, criu)
		})
	}
}

func testEnvGrantsNoGPU(d *harness.Daemon, criu harness.LoggingCRIU) {
	h := harness.NewFakeHost(1, "f9f9f9f9")
	d.FakeGPUs(h)
	d.StartApp(d.NewContainerWith("f9-src", nil, harness.WithGPUs(h, 0)))
	ref, before := d.TaskCheckpoint("f9-src", "--exit")
	d.WaitStopped("f9-src")
	if m := d.CheckpointManifest(ref); len(m.Needs) != 1 || m.Needs[0].UUID != h.UUIDs[0] {
		d.T.Fatalf("the checkpoint needs %+v, want GPU %s", m.Needs, h.UUIDs[0])
	}
	ctx := harness.NamespacedCtx()
	ckpt, err := d.Client.GetImage(ctx, ref)
	if err != nil {
		d.T.Fatal(err)
	}
	envAll := oci.WithEnv([]string{"NVIDIA_VISIBLE_DEVICES=all"})

	// The attacker's container: the variable, no GPU node.
	dumps := criu.RuncSwrks()
	bare := d.NewContainerWith("f9-env", nil, harness.WithGPUs(h), envAll)
	assertNoGPUNode(d.T, ctx, bare)
	_, err = bare.NewTask(ctx, cio.LogFile(d.LogPath("f9-env")), client.WithTaskCheckpoint(ckpt))
	if err == nil {
		d.T.Fatalf("a GPU checkpoint was restored into a container without a GPU node\n%s", harness.LastLines(d.Log(), 30))
	}
	harness.WantIn(d.T, err.Error(), "no matching GPU", "1× NVIDIA H100 80GB HBM3", "would see no GPU", "nothing was restored")
	if !errdefs.IsFailedPrecondition(err) {
		d.T.Errorf("error class %v, want failed precondition", err)
	}
	d.AssertNoTask("f9-env")
	d.AssertNoRestore("f9-env")
	if criu.RuncSwrks() != dumps {
		d.T.Fatalf("CRIU ran for the refused restore:\n%s", harness.ReadFile(criu.Calls))
	}

	// The same restore into a container given the GPU's node.
	given := d.NewContainerWith("f9-node", nil, harness.WithGPUs(h, 0), envAll)
	task, err := given.NewTask(ctx, cio.LogFile(d.LogPath("f9-node")), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		d.T.Fatalf("restore with the GPU's node: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.T.Fatal(err)
	}
	d.WaitTicks("f9-node", 3)
	harness.AssertContinues(d.T, d.LogPath("f9-node"), before)
	d.AssertGPUs("f9-node", h, 0)
	if criu.RuncSwrks() == dumps {
		d.T.Fatalf("runc restored without CRYO_CRIU=%s", criu.Path)
	}
}

// assertNoGPUNode checks that container c's spec names no GPU node and
// sets NVIDIA_VISIBLE_DEVICES: the attack's premise.
func assertNoGPUNode(t testing.TB, ctx context.Context, c client.Container) {
	t.Helper()
	s, err := c.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range s.Linux.Devices {
		if strings.HasPrefix(dev.Path, "/dev/nvidia") {
			t.Fatalf("the spec names %s", dev.Path)
		}
	}
	if !slices.Contains(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=all") {
		t.Fatalf("the spec's environment lacks NVIDIA_VISIBLE_DEVICES=all: %v", s.Process.Env)
	}
}
