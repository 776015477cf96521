package controller

import (
	"context"
	"sort"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// retain deletes finished Checkpoints: this one once its TTL has passed,
// and the Succeeded ones of its source beyond the newest one's Keep. The
// deletes go through the cleanup finalizer, so the agent removes their
// images before the objects go.
func (r *Reconciler) retain(ctx context.Context, cp *cryov1.Checkpoint, now time.Time) (ctrl.Result, error) {
	if cp.Status.Phase == cryov1.PhaseSucceeded {
		if err := r.keep(ctx, cp); err != nil {
			return ctrl.Result{}, err
		}
	}
	if cp.Spec.TTL == nil {
		return ctrl.Result{}, nil
	}
	left := finished(cp).Add(cp.Spec.TTL.Duration).Sub(now)
	if left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	ctrl.LoggerFrom(ctx).Info("deleting checkpoint past its ttl", "ttl", cp.Spec.TTL.Duration)
	return ctrl.Result{}, r.remove(ctx, cp)
}

// keep applies the count of the source's newest Succeeded Checkpoint: it
// is the latest decision of whoever checkpoints that pod. Failed ones do
// not count, so that failures never push a good image out.
func (r *Reconciler) keep(ctx context.Context, cp *cryov1.Checkpoint) error {
	var list cryov1.CheckpointList
	if err := r.List(ctx, &list, client.InNamespace(cp.Namespace)); err != nil {
		return err
	}
	var same []*cryov1.Checkpoint
	for i := range list.Items {
		o := &list.Items[i]
		if o.Spec.PodName == cp.Spec.PodName && o.Spec.Container == cp.Spec.Container &&
			o.Status.Phase == cryov1.PhaseSucceeded && o.DeletionTimestamp.IsZero() {
			same = append(same, o)
		}
	}
	sort.Slice(same, func(i, j int) bool { return newer(same[i], same[j]) })
	if len(same) == 0 || same[0].Spec.Keep == nil || *same[0].Spec.Keep == 0 || int(*same[0].Spec.Keep) >= len(same) {
		return nil
	}
	for _, old := range same[*same[0].Spec.Keep:] {
		ctrl.LoggerFrom(ctx).Info("deleting checkpoint beyond the count to keep", "old", old.Name, "keep", *same[0].Spec.Keep)
		if err := r.remove(ctx, old); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes exactly the object read, not a newer one of that name.
func (r *Reconciler) remove(ctx context.Context, cp *cryov1.Checkpoint) error {
	uid := cp.UID
	return client.IgnoreNotFound(r.Delete(ctx, cp, client.Preconditions{UID: &uid}))
}

// newer orders by completion, then creation, then name, so that the order
// is total and the same in every round.
func newer(a, b *cryov1.Checkpoint) bool {
	ta, tb := finished(a), finished(b)
	if !ta.Equal(tb) {
		return ta.After(tb)
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return a.Name > b.Name
}

func finished(cp *cryov1.Checkpoint) time.Time {
	if cp.Status.CompletionTime != nil {
		return cp.Status.CompletionTime.Time
	}
	return cp.CreationTimestamp.Time
}
