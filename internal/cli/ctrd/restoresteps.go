package ctrd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// A restore into containerd is a table of steps. Until the task starts,
// the restore has only made records in containerd (a lease and its blobs,
// a container, a task that has not run): an interrupt stops it between
// steps and removes them, and the checkpoint, which the restore only
// reads, is whole for the next try. The start is where the shim runs
// CRIU and resumes CUDA: it is not cut short (an interrupt there would
// kill what CRIU had restored, for no gain), so it runs to its end and
// the restore completes.
const (
	StepName      = "name"       // the container name is free
	StepBaseImage = "base-image" // the base image is there, unpacked
	StepLease     = "lease"      // the lease that keeps the blobs below
	StepContent   = "content"    // the rw layer (and CRIU's images, for other runtimes) into the store
	StepContainer = "container"  // the container, from the base image and the rw layer
	StepTask      = "task"       // the task, created from the checkpoint (nothing runs yet)
	StepStart     = "start"      // the shim's CRIU restore and CUDA resume: never interrupted
)

// ctrdStep is one step of the table.
type ctrdStep struct {
	name string
	do   func(ctx context.Context) error
}

// steps is the restore's table, in order; spec makes the new container's
// spec.
func (r *ctrdRestore) steps(spec func(client.Image) []oci.SpecOpts) []ctrdStep {
	return []ctrdStep{
		{StepName, r.stepName},
		{StepBaseImage, r.stepBaseImage},
		{StepLease, r.stepLease},
		{StepContent, r.stepContent},
		{StepContainer, func(ctx context.Context) error { return r.stepContainer(ctx, spec) }},
		{StepTask, r.stepTask},
		{StepStart, r.stepStart},
	}
}

// RestoreSteps names, in order, the steps of a restore into containerd:
// the names a failpoint holds it before ("ctrd-restore/STEP"). Tests sweep
// them, so that a step added to the table is swept without editing them.
func RestoreSteps() []string {
	var names []string
	for _, s := range (&ctrdRestore{}).steps(nil) {
		names = append(names, s.name)
	}
	return names
}

// Interrupted is a restore into containerd that an interrupt stopped
// before its start: what it had made in containerd is removed, nothing
// was restored.
type Interrupted struct {
	Name string // the container's
	Step string // the step it stopped before or in
	Err  error  // the interrupt (context.Cause), with the step's error it caused
	// Left is what could not be removed from containerd; nil: nothing of
	// the restore is left there.
	Left error
}

func (i *Interrupted) Error() string {
	return fmt.Sprintf("stopped at step %s: %v", i.Step, i.Err)
}

func (i *Interrupted) Unwrap() error { return i.Err }

// runSteps takes the table's steps in order.
func (r *ctrdRestore) runSteps(ctx context.Context, steps []ctrdStep) error {
	for _, s := range steps {
		failpoint(s.name)
		r.reached = s.name
		if s.name == StepStart {
			// Never cut short by an interrupt; the restore's deadline
			// still bounds it.
			var cancel context.CancelFunc
			ctx, cancel = keepDeadline(ctx)
			defer cancel()
		} else if err := context.Cause(ctx); err != nil {
			return &Interrupted{Name: r.o.Name, Step: s.name, Err: err}
		}
		if err := s.do(ctx); err != nil {
			if s.name != StepStart && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The interrupt is the cause, the step's error its
				// symptom: the front end words the former.
				return &Interrupted{Name: r.o.Name, Step: s.name, Err: fmt.Errorf("%w (%s)", context.Cause(ctx), symptom(err))}
			}
			return err
		}
	}
	return nil
}

// symptom is a step's error cut off by an interrupt, without the remedy
// it carries for a failure of its own ("read the shim's lines"): the
// interrupt's report gives the one remedy that applies, the retry.
func symptom(err error) string {
	cause, _, _ := report.Split(err.Error())
	return cause
}

// keepDeadline is ctx without its cancellation, bounded by its deadline.
func keepDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), d)
	}
	return context.WithoutCancel(ctx), func() {}
}

func (r *ctrdRestore) stepName(ctx context.Context) error {
	return nameFree(ctx, r.c, r.o.Options, r.o.Name, r.logf)
}

func (r *ctrdRestore) stepBaseImage(ctx context.Context) (err error) {
	r.img, err = r.baseImage(ctx)
	return err
}

// stepLease takes the lease that keeps the checkpoint's blobs until the
// task has been created from them (the container holds its snapshot
// after that). It names its owner, so that the lease of a cryo killed
// mid-restore is deleted by the next restore rather than kept a day.
func (r *ctrdRestore) stepLease(ctx context.Context) error {
	ls := r.c.LeasesService()
	removeAbandonedLeases(ctx, ls)
	l, err := ls.Create(ctx, leases.WithRandomID(), leases.WithExpiration(24*time.Hour),
		leases.WithLabels(map[string]string{OwnerLabel: ownerMark()}))
	if err != nil {
		return fmt.Errorf("containerd lease: %w", err)
	}
	r.lease = &l
	return nil
}

func (r *ctrdRestore) stepContent(ctx context.Context) (err error) {
	if r.criu, err = r.checkpointOpt(ctx); err != nil {
		return err
	}
	rw, ok, err := r.writeRW(ctx)
	if ok {
		r.rw = &rw
	}
	return err
}

func (r *ctrdRestore) stepContainer(ctx context.Context, spec func(client.Image) []oci.SpecOpts) error {
	img := r.img
	opts := []client.NewContainerOpts{client.WithImage(img)}
	if r.o.Snapshotter != "" {
		opts = append(opts, client.WithSnapshotter(r.o.Snapshotter))
	}
	// The spec comes before the rw layer: WithImageConfig looks a user
	// name up in the rootfs's /etc/passwd, which must be the base image's,
	// not one that the checkpoint's diff rewrote.
	opts = append(opts, client.WithNewSnapshot(r.o.Name+"-snapshot", img), client.WithNewSpec(spec(img)...))
	if r.rw != nil {
		opts = append(opts, applyRW(*r.rw))
	}
	// Marked as a restore under way until its task runs: see
	// removeAbandoned.
	opts = append(opts, client.WithRuntime(r.o.Runtime, nil), client.WithAdditionalContainerLabels(map[string]string{OwnerLabel: ownerMark()}))
	r.logf("creating container %s (%s, runtime %s; its spec from the base image and the flags)", r.o.Name, img.Name(), r.o.Runtime)
	ctr, err := r.c.NewContainer(ctx, r.o.Name, opts...)
	if err != nil {
		return fmt.Errorf("create container %s: %w", r.o.Name, err)
	}
	r.ctr = ctr
	r.noteSnapshotter(ctx, ctr)
	return nil
}

func (r *ctrdRestore) stepTask(ctx context.Context) (err error) {
	r.task, err = r.newTask(ctx, r.ctr, r.criu)
	return err
}

func (r *ctrdRestore) stepStart(ctx context.Context) (err error) {
	r.res, err = r.startTask(ctx, r.ctr, r.task)
	if err != nil {
		return err
	}
	if err := r.checkRunning(ctx); err != nil {
		return err
	}
	// The task runs: the container is no longer a restore under way.
	if _, err := r.ctr.SetLabels(ctx, map[string]string{OwnerLabel: ""}); err != nil {
		r.logf("warning: could not clear label %s of container %s: %v", OwnerLabel, r.ctr.ID(), err)
	}
	return nil
}

// OwnerLabel marks a container (and a lease) that a restore is making,
// with its cryo's pid and start time: one whose cryo is gone was left by a
// killed restore.
const OwnerLabel = "io.cryo.restore.owner"

// ownerMark is this process's OwnerLabel value.
func ownerMark() string {
	return ownerMarkOf(os.Getpid())
}

func ownerMarkOf(pid int) string { return strconv.Itoa(pid) + "/" + procfs.StartTime(pid) }

// ownerGone reports whether the cryo named by an OwnerLabel value is gone
// (a pid reused since is another process).
func ownerGone(mark string) bool {
	pid, start, ok := strings.Cut(mark, "/")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil || n <= 0 {
		return false
	}
	return !procfs.Alive(n) || procfs.StartTime(n) != start
}

// removeAbandonedLeases deletes the leases of restores whose cryo is gone.
func removeAbandonedLeases(ctx context.Context, ls leases.Manager) {
	left, err := ls.List(ctx, "labels.\""+OwnerLabel+"\"")
	if err != nil {
		return
	}
	for _, l := range left {
		if ownerGone(l.Labels[OwnerLabel]) {
			_ = ls.Delete(ctx, l)
		}
	}
}

// removeAbandoned removes container ctr when a restore whose cryo is gone
// left it before its task ran: it holds no workload (a task merely created
// has run nothing of the checkpoint, or CRIU's restore was cut off with
// its cryo), and the checkpoint, which a restore only reads, restores
// again. It reports whether it removed it.
func removeAbandoned(ctx context.Context, ctr client.Container) (string, bool) {
	labels, err := ctr.Labels(ctx)
	mark := labels[OwnerLabel]
	if err != nil || mark == "" || !ownerGone(mark) {
		return "", false
	}
	if task, err := ctr.Task(ctx, nil); err == nil {
		if st, err := task.Status(ctx); err != nil || (st.Status != client.Created && st.Status != client.Stopped) {
			return "", false
		}
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil {
			return "", false
		}
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil {
		return "", false
	}
	pid, _, _ := strings.Cut(mark, "/")
	return pid, true
}
