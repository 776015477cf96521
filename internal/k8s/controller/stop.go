package controller

import (
	"context"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// stopsSource reports whether the Checkpoint asks for its pod to go and
// that is not done yet.
func stopsSource(cp *cryov1.Checkpoint) bool {
	return cp.Spec.LeaveRunning != nil && !*cp.Spec.LeaveRunning && cp.Status.Phase == cryov1.PhaseSucceeded &&
		meta.FindStatusCondition(cp.Status.Conditions, cryov1.ConditionSourceDeleted) == nil
}

// stopSource deletes the source pod of a Succeeded Checkpoint with
// spec.leaveRunning false: only now, when the image is pushed and its
// digest recorded, so that a failure anywhere before leaves the pod
// running. The delete names the pod's UID, so a newer pod of the same
// name (a StatefulSet's) is never the one deleted. The outcome goes into
// the SourceDeleted condition, which also makes this run once.
func (r *Reconciler) stopSource(ctx context.Context, cp *cryov1.Checkpoint) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cp.Namespace, Name: cp.Spec.PodName}}
	uid := types.UID(cp.Status.PodUID)
	var err error = apierrors.NewNotFound(corev1.Resource("pods"), pod.Name) // assigned before the UID was recorded: delete nothing
	if uid != "" {
		err = r.Delete(ctx, pod, client.Preconditions{UID: &uid})
	}
	cond := metav1.Condition{Type: cryov1.ConditionSourceDeleted, Status: metav1.ConditionTrue, Reason: "Deleted",
		Message:            "pod " + cp.Spec.PodName + " was deleted after its checkpoint image " + cp.Status.Image + " was pushed (spec.leaveRunning false)",
		ObservedGeneration: cp.Generation}
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		cond.Status, cond.Reason = metav1.ConditionFalse, "PodGone"
		cond.Message = "pod " + cp.Spec.PodName + " was gone or replaced by a newer pod of its name before the push ended: nothing was deleted"
	case err != nil:
		return err
	}
	// Retried here on a conflict, not by a new round: a new round would
	// find the pod gone and record PodGone for a pod this one deleted.
	// The read is uncached (the API reader): the cache may lag behind.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.Pods.Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
			return err
		}
		meta.SetStatusCondition(&cp.Status.Conditions, cond)
		return r.Status().Update(ctx, cp)
	})
	if err != nil {
		return err
	}
	if r.Events != nil {
		r.Events.Eventf(cp, nil, corev1.EventTypeNormal, "Source"+cond.Reason, "DeletePod", "%s", cond.Message)
	}
	return nil
}
