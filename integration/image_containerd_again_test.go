package integration

// A container that `cryo image restore --containerd` brought back is an
// ordinary containerd task: ctr checkpoints it again, and that checkpoint
// restores again, the counter going on each time.

import (
	"strings"
	"testing"
	"time"
)

func TestImageContainerdCheckpointAgain(t *testing.T) {
	for _, v := range ctrdVersions {
		t.Run(v.name, func(t *testing.T) {
			n := newCtrdNode(t, v)
			n.importTestImage()
			app, clone, clone2 := uniqueID("app"), uniqueID("clone"), uniqueID("clone2")
			n.runApp(app)
			ckpt, tick := n.taskCheckpoint(app, "--exit")
			n.waitStopped(app)

			// First round: image, restore as clone with its output
			// discarded (no --log): containerd's null IO gave it the host's
			// /dev/null, which CRIU could not dump again.
			// Each restore hands over GPU 0's stand-in node (--gpus), as
			// a device plugin would: the app ran with one.
			ref, gpu0 := "localhost/ckpt/again-"+v.dir+":1", standInNode(t, 0)
			n.cryo(t, "image", "build", "--containerd", ckpt, ref)
			wantIn(t, n.cryo(t, "image", "restore", "--containerd", "--name", clone, "--gpus", gpu0, ref), "restored container "+clone)
			// The name in use is refused before anything is created, with
			// the status Podman's name in use gets (2).
			_, stderr, code := cryoSplit(t, n.imgNode.env, n.withAt([]string{"image", "restore", "--containerd", "--name", clone, "--gpus", gpu0, ref})...)
			if code != 2 || !strings.Contains(stderr, "container name in use: container "+clone+" already exists") {
				t.Fatalf("image restore --name %s in use: exit %d, want 2:\n%s", clone, code, stderr)
			}
			time.Sleep(time.Second) // it runs a while, ticking unseen

			// Second round: ctr checkpoints the restored task, and that
			// checkpoint restores as clone2, whose ticks go on from app's.
			ckpt2, _ := n.taskCheckpoint(clone, "--exit")
			n.waitStopped(clone)
			ref2 := "localhost/ckpt/again-" + v.dir + ":2"
			n.cryo(t, "image", "build", "--containerd", ckpt2, ref2)
			out := n.cryo(t, "image", "restore", "--containerd", "--name", clone2, "--log", n.logPath(clone2), "--gpus", gpu0, ref2)
			wantIn(t, out, "restored container "+clone2)
			n.waitTicksIn(n.logPath(clone2), 3)
			// app stopped at tick; clone ran on for a second (10 ticks).
			if first := ctrdTicks(t, n.logPath(clone2))[0]; first < tick+10 {
				t.Fatalf("clone2 printed tick %d first; app stopped at %d and clone ran on: the counter did not go on", first, tick)
			}
			// Third round: clone2 (stdout in a log) checkpoints again too.
			ckpt3, tick3 := n.taskCheckpoint(clone2)
			if ckpt3 == "" || tick3 < 0 {
				t.Errorf("third checkpoint: image %q, tick %d", ckpt3, tick3)
			}
			if st := n.taskStatus(clone2); st != "running" {
				t.Errorf("twice-restored task is %s", st)
			}
		})
	}
}
