package controller

import (
	"context"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// DefaultTimeout is a Checkpoint's timeout when its spec has none (the
// CRD defaults it too; this covers objects stored before that default).
const DefaultTimeout = 10 * time.Minute

// Reconciler drives Checkpoints through the controller's part of their
// life: the finalizer, assignment, the timeout and retention.
type Reconciler struct {
	client.Client
	// Pods reads pods; the manager's API reader, uncached, so that the
	// controller does not hold every pod of the cluster in memory for a
	// read at each Checkpoint's assignment.
	Pods client.Reader
	// Events records the deletion of a source pod; nil: none.
	Events events.EventRecorder
	// Now is the clock, for tests; nil is time.Now.
	Now func() time.Time
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager registers the reconciler, watching Checkpoints.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&cryov1.Checkpoint{}).Named("checkpoint").Complete(r)
}

// Reconcile acts on one Checkpoint. Every write carries the object's
// resourceVersion, so that a status the agent wrote meanwhile wins and
// this is retried on the new object.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cp cryov1.Checkpoint
	if err := r.Get(ctx, req.NamespacedName, &cp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cp.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.release(ctx, &cp)
	}
	if orig := cp.DeepCopy(); controllerutil.AddFinalizer(&cp, cryov1.CleanupFinalizer) {
		// The patch's event brings the next round.
		return ctrl.Result{}, r.Patch(ctx, &cp, lockedPatch(orig))
	}
	now := r.now()
	switch {
	case stopsSource(&cp):
		// The update's event brings the retention round.
		return ctrl.Result{}, r.stopSource(ctx, &cp)
	case cp.Status.Phase.Done():
		return r.retain(ctx, &cp, now)
	case cp.Status.Phase == "" || cp.Status.Phase == cryov1.PhasePending:
		return r.assign(ctx, &cp, now)
	}
	return r.deadline(ctx, &cp, now)
}

// release removes the finalizer of a Checkpoint that never reached a
// node: nothing of it exists outside the API. An assigned one waits for
// the agent on its node (see v1alpha1.CleanupFinalizer).
func (r *Reconciler) release(ctx context.Context, cp *cryov1.Checkpoint) error {
	orig := cp.DeepCopy()
	if cp.Status.Node != "" || !controllerutil.RemoveFinalizer(cp, cryov1.CleanupFinalizer) {
		return nil
	}
	return client.IgnoreNotFound(r.Patch(ctx, cp, lockedPatch(orig)))
}

// lockedPatch is a merge patch from orig that fails on a newer object:
// it sends only what changed (an Update would send the whole spec back,
// re-encoded), and the finalizer list is replaced as a whole, so it must
// be the list of the object read.
func lockedPatch(orig *cryov1.Checkpoint) client.Patch {
	return client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
}

// deadline fails a Checkpoint past its timeout and otherwise comes back
// when the timeout passes.
func (r *Reconciler) deadline(ctx context.Context, cp *cryov1.Checkpoint, now time.Time) (ctrl.Result, error) {
	timeout := DefaultTimeout
	if cp.Spec.Timeout != nil && cp.Spec.Timeout.Duration > 0 {
		timeout = cp.Spec.Timeout.Duration
	}
	left := cp.CreationTimestamp.Add(timeout).Sub(now)
	if left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	step := string(cp.Status.Phase)
	if step == "" {
		step = string(cryov1.PhasePending)
	}
	return ctrl.Result{}, r.fail(ctx, cp, now, &Refusal{Step: step, Reason: cryov1.ReasonTimeout, Err: ErrTimeout,
		Remedy: "look at the agent's Events on node " + orNone(cp.Status.Node) + ", then create the Checkpoint again with a longer spec.timeout"})
}

// fail writes the refusal into the Checkpoint's status.
func (r *Reconciler) fail(ctx context.Context, cp *cryov1.Checkpoint, now time.Time, ref *Refusal) error {
	ref.Checkpoint, ref.Container = cp.Namespace+"/"+cp.Name, cp.Spec.Container
	ctrl.LoggerFrom(ctx).Info("checkpoint failed", "error", ref.Error())
	cp.Status.Phase = cryov1.PhaseFailed
	cp.Status.Failure = ref.failure()
	t := metav1.NewTime(now)
	cp.Status.CompletionTime = &t
	cp.Status.ObservedGeneration = cp.Generation
	meta.SetStatusCondition(&cp.Status.Conditions, metav1.Condition{Type: cryov1.ConditionFailed, Status: metav1.ConditionTrue,
		Reason: ref.Reason, Message: ref.Err.Error() + "; " + ref.Remedy, ObservedGeneration: cp.Generation})
	return r.Status().Update(ctx, cp)
}

func orNone(s string) string {
	if s == "" {
		return "(none assigned)"
	}
	return s
}
