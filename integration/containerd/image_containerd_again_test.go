package containerd

import (
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

func TestImageContainerdCheckpointAgain(t *testing.T) {
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) {
			n := harness.NewCtrdNode(t, v)
			n.ImportTestImage()
			app, clone, clone2 := harness.UniqueID("app"), harness.UniqueID("clone"), harness.UniqueID("clone2")
			n.RunApp(app)
			ckpt, tick := n.TaskCheckpoint(app, "--exit")
			n.WaitStopped(app)

			// First round: image, restore as clone with its output
			// discarded (no --log): containerd's null IO gave it the host's
			// /dev/null, which CRIU could not dump again.
			// Each restore hands over GPU 0's stand-in node (--gpus), as
			// a device plugin would: the app ran with one.
			ref, gpu0 := "localhost/ckpt/again-"+v.Dir+":1", harness.StandInNode(t, 0)
			n.Cryo(t, "image", "build", "--containerd", ckpt, ref)
			harness.WantIn(t, n.Cryo(t, "image", "restore", "--containerd", "--name", clone, "--gpus", gpu0, ref), "restored container "+clone)
			// The name in use is refused before anything is created, with
			// the status Podman's name in use gets (2).
			_, stderr, code := harness.CryoSplit(t, n.ImgNode.Env, n.WithAt([]string{"image", "restore", "--containerd", "--name", clone, "--gpus", gpu0, ref})...)
			if code != 2 || !strings.Contains(stderr, "container name in use: container "+clone+" already exists") {
				t.Fatalf("image restore --name %s in use: exit %d, want 2:\n%s", clone, code, stderr)
			}
			time.Sleep(time.Second) // it runs a while, ticking unseen

			// Second round: ctr checkpoints the restored task, and that
			// checkpoint restores as clone2, whose ticks go on from app's.
			ckpt2, _ := n.TaskCheckpoint(clone, "--exit")
			n.WaitStopped(clone)
			ref2 := "localhost/ckpt/again-" + v.Dir + ":2"
			n.Cryo(t, "image", "build", "--containerd", ckpt2, ref2)
			out := n.Cryo(t, "image", "restore", "--containerd", "--name", clone2, "--log", n.LogPath(clone2), "--gpus", gpu0, ref2)
			harness.WantIn(t, out, "restored container "+clone2)
			n.WaitTicksIn(n.LogPath(clone2), 3)
			// app stopped at tick; clone ran on for a second (10 ticks).
			if first := harness.CtrdTicks(t, n.LogPath(clone2))[0]; first < tick+10 {
				t.Fatalf("clone2 printed tick %d first; app stopped at %d and clone ran on: the counter did not go on", first, tick)
			}
			// Third round: clone2 (stdout in a log) checkpoints again too.
			ckpt3, tick3 := n.TaskCheckpoint(clone2)
			if ckpt3 == "" || tick3 < 0 {
				t.Errorf("third checkpoint: image %q, tick %d", ckpt3, tick3)
			}
			if st := n.TaskStatus(clone2); st != "running" {
				t.Errorf("twice-restored task is %s", st)
			}
		})
	}
}
