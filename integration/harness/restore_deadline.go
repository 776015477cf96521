package harness

import (
	"context"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// RestoreDeadline is the tests' CRYO_RESTORE_TIMEOUT.
	RestoreDeadline = 4 * time.Second
	// DeadlineMargin is what a failed restore may take beyond the deadline:
	// killing CRIU, removing runc's container, and the round trips of
	// containerd and CRI on a loaded two-core machine.
	DeadlineMargin = 8 * time.Second
)

// failedRestore restores checkpoint ref into a new container id through
// the Go client, as `ctr container restore` does, and returns how long
// its start took and the error of the start.
func (d *Daemon) FailedRestore(ref, id string) (time.Duration, error) {
	d.T.Helper()
	ctx, cancel := context.WithTimeout(NamespacedCtx(), RestoreDeadline+2*DeadlineMargin)
	defer cancel()
	ckpt, err := d.Client.GetImage(ctx, ref)
	if err != nil {
		d.T.Fatalf("get checkpoint %s: %v", ref, err)
	}
	task, err := d.NewContainer(id).NewTask(ctx, cio.LogFile(d.LogPath(id)), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		d.T.Fatalf("create restored task %s: %v\n%s", id, err, LastLines(d.Log(), 30))
	}
	start := time.Now()
	err = task.Start(ctx)
	took := time.Since(start)
	if err == nil {
		d.T.Fatalf("restore of %s with a faulty CRIU succeeded", id)
	}
	if ctx.Err() != nil {
		// Go on: what the hung restore leaves is checked all the same.
		d.T.Errorf("restore of %s still hung after %s: %v\n%s", id, took.Round(time.Millisecond), err, LastLines(d.Log(), 30))
	}
	return took, err
}

// deleteFailed deletes the task of a failed restore and its container, as
// `ctr task delete` and `ctr container delete` do; both must succeed.
func (d *Daemon) DeleteFailed(id string) {
	d.T.Helper()
	ctx, cancel := context.WithTimeout(NamespacedCtx(), time.Minute)
	defer cancel()
	c, err := d.Client.LoadContainer(ctx, id)
	if err != nil {
		d.T.Fatalf("load container %s: %v", id, err)
	}
	if task, err := c.Task(ctx, nil); err == nil {
		if _, err := task.Delete(ctx); err != nil {
			d.T.Errorf("delete the task of the failed restore %s: %v\n%s", id, err, LastLines(d.Log(), 20))
		}
	}
	if err := c.Delete(ctx, client.WithSnapshotCleanup); err != nil {
		d.T.Errorf("delete container %s: %v", id, err)
	}
}

// failedStart starts a pod's restored container, as the kubelet does,
// and returns how long the call took and the error of StartContainer.
func (p *CRIPod) FailedStart() (time.Duration, error) {
	p.N.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RestoreDeadline+2*DeadlineMargin)
	defer cancel()
	start := time.Now()
	_, err := p.N.Rt.StartContainer(ctx, &criapi.StartContainerRequest{ContainerId: p.Container})
	took := time.Since(start)
	if err == nil {
		p.N.T.Fatalf("StartContainer with a faulty CRIU succeeded")
	}
	if ctx.Err() != nil {
		// Go on: what the hung restore leaves is checked all the same.
		p.N.T.Errorf("StartContainer still hung after %s: %v", took.Round(time.Millisecond), err)
	}
	return took, err
}
