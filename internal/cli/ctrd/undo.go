package ctrd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// A restore says that nothing of it is left in containerd only once it
// has read containerd back. An interrupt can land in the middle of a
// call: containerd may have made the container, the task or the lease
// after the client stopped waiting for its answer, and the restore then
// holds no handle on it. undo finds those by name and by the restore's
// owner mark, removes them, and reads containerd back.

// ErrLeft: a failed restore's records are still in containerd after its
// undo, as read back.
var ErrLeft = errors.New("left in containerd")

// undo removes what the steps made in containerd, after a failure or an
// interrupt: the task (its processes killed, if any ran), the container
// with its snapshot, and the leases with them the blobs written for the
// restore. It returns what a read-back still finds there; nil: nothing.
func (r *ctrdRestore) undo(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	r.adoptCutOff(ctx)
	var errs []error
	pid := 0
	if r.task != nil {
		pid = int(r.task.Pid())
		if _, err := r.task.Delete(ctx, client.WithProcessKill); err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", r.task.ID(), err))
		}
	}
	if r.ctr != nil {
		if err := r.ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", r.ctr.ID(), err))
		}
	}
	errs = append(errs, r.removeOwnLeases(ctx))
	r.lease = nil
	left := r.leftBehind(ctx, pid)
	if left != nil && errors.Join(errs...) != nil {
		return fmt.Errorf("%w (removing them: %v)", left, errors.Join(errs...))
	}
	return left
}

// adoptCutOff takes on what a call cut off in the middle made: the
// container of this restore (its owner mark is this cryo's) and the task
// of the container.
func (r *ctrdRestore) adoptCutOff(ctx context.Context) {
	if r.ctr == nil && r.reached == StepContainer {
		if ctr, err := r.c.LoadContainer(ctx, r.o.Name); err == nil && r.owns(ctx, ctr) {
			r.ctr = ctr
		}
	}
	if r.task == nil && r.ctr != nil {
		if task, err := r.ctr.Task(ctx, nil); err == nil {
			r.task = task
		}
	}
}

// owns reports whether ctr carries this cryo's owner mark.
func (r *ctrdRestore) owns(ctx context.Context, ctr client.Container) bool {
	labels, err := ctr.Labels(ctx)
	return err == nil && labels[OwnerLabel] == ownerMark()
}

// removeOwnLeases deletes every lease this cryo's restore took, the one
// it holds and one whose creation was cut off.
func (r *ctrdRestore) removeOwnLeases(ctx context.Context) error {
	if r.reached == "" || r.reached == StepName || r.reached == StepBaseImage {
		return nil // no lease was asked for
	}
	ls := r.c.LeasesService()
	own, err := ls.List(ctx, "labels.\""+OwnerLabel+"\"==\""+ownerMark()+"\"")
	if err != nil {
		return fmt.Errorf("list the leases: %w", err)
	}
	var errs []error
	for _, l := range own {
		if err := ls.Delete(ctx, l); err != nil {
			errs = append(errs, fmt.Errorf("lease %s: %w", l.ID, err))
		}
	}
	return errors.Join(errs...)
}

// leftBehind reads containerd back after undo: the container's name, this
// cryo's leases, and the process the task had started. nil: none is left.
func (r *ctrdRestore) leftBehind(ctx context.Context, pid int) error {
	var left []string
	if r.ctr != nil || r.reached == StepContainer {
		left = append(left, r.containerLeft(ctx)...)
	}
	if r.reached != "" && r.reached != StepName && r.reached != StepBaseImage {
		own, err := r.c.LeasesService().List(ctx, "labels.\""+OwnerLabel+"\"==\""+ownerMark()+"\"")
		if err != nil {
			left = append(left, "its lease, perhaps: containerd did not list the leases ("+err.Error()+")")
		}
		for _, l := range own {
			left = append(left, "lease "+l.ID)
		}
	}
	if pid > 0 && !gone(pid, 5*time.Second) {
		left = append(left, fmt.Sprintf("the task's process %d (state %s)", pid, procfs.State(pid)))
	}
	if len(left) == 0 {
		return nil
	}
	return fmt.Errorf("%w, read back: %s", ErrLeft, strings.Join(left, ", "))
}

// containerLeft is the restore's container as containerd reports it now,
// with its task's state: nothing when the name is free or another's.
func (r *ctrdRestore) containerLeft(ctx context.Context) []string {
	ctr, err := r.c.LoadContainer(ctx, r.o.Name)
	switch {
	case errdefs.IsNotFound(err):
		return nil
	case err != nil:
		return []string{"container " + r.o.Name + ", perhaps: containerd did not answer (" + err.Error() + ")"}
	case r.ctr == nil && !r.owns(ctx, ctr):
		return nil // another's, made since: the name was free at step name
	}
	what := "container " + r.o.Name
	if task, err := ctr.Task(ctx, nil); err == nil {
		st, serr := task.Status(ctx)
		if serr != nil {
			what += " with a task of unknown state (" + serr.Error() + ")"
		} else {
			what += fmt.Sprintf(" with its task %s (pid %d)", st.Status, task.Pid())
		}
	}
	return []string{what}
}

// gone waits up to wait for pid to be gone (a killed task's process is
// reaped by its shim, not at once).
func gone(pid int, wait time.Duration) bool {
	for end := time.Now().Add(wait); ; time.Sleep(50 * time.Millisecond) {
		if !procfs.Alive(pid) {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// checkRunning reads the started task's state back before the restore
// says it is restored: containerd reports it running and its process is
// alive. (The shim checked CUDA and the stop of the restored tree before
// its Start returned.)
func (r *ctrdRestore) checkRunning(ctx context.Context) error {
	st, err := r.task.Status(ctx)
	if err != nil {
		return fmt.Errorf("read back the restored task %s: %w", r.task.ID(), err)
	}
	pid := int(r.task.Pid())
	switch {
	case st.Status != client.Running:
		return fmt.Errorf("the restored task %s is %s after its start, not running (exit status %d)", r.task.ID(), st.Status, st.ExitStatus)
	case !procfs.Alive(pid):
		return fmt.Errorf("the restored task %s's process %d died after its start", r.task.ID(), pid)
	}
	return nil
}
