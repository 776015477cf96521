package harness

import (
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// pauseAndCheck pauses id with ctr and checks that it is frozen with its
// CUDA state checkpointed.
func (d *Daemon) PauseAndCheck(id string, pid int) {
	d.T.Helper()
	d.Ctr("task", "pause", id)
	if st := d.TaskStatus(id); st != client.Paused {
		d.T.Fatalf("%s after ctr task pause: %s, want paused", id, st)
	}
	p, err := fakecuda.ReadPage(pid)
	if err != nil || p.State != 2 || p.HoldsDevices && len(p.GPUs) == 0 {
		d.T.Fatalf("CUDA of %s after ctr task pause: %+v (%v), want checkpointed", id, p, err)
	}
	last := CtrdLastTick(d.T, d.LogPath(id))
	time.Sleep(300 * time.Millisecond)
	if now := CtrdLastTick(d.T, d.LogPath(id)); now != last {
		d.T.Fatalf("%s ticked %d→%d while paused", id, last, now)
	}
}
