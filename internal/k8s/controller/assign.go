package controller

import (
	"context"
	"strings"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/internal/k8s/compat"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// assign gives a new Checkpoint to the node its pod runs on, with the
// compatibility key of the pod's container and the requester the
// webhook recorded; or fails it when that pod cannot be checkpointed.
func (r *Reconciler) assign(ctx context.Context, cp *cryov1.Checkpoint, now time.Time) (ctrl.Result, error) {
	if res, err := r.deadline(ctx, cp, now); err != nil || cp.Status.Phase == cryov1.PhaseFailed {
		return res, err
	}
	if ref := requester(cp); ref != nil {
		return ctrl.Result{}, r.fail(ctx, cp, now, ref)
	}
	pod, ref, err := r.sourcePod(ctx, cp)
	if err != nil {
		return ctrl.Result{}, err
	}
	if ref != nil {
		return ctrl.Result{}, r.fail(ctx, cp, now, ref)
	}
	key, err := compat.Key(&pod.Spec, cp.Spec.Container)
	if err != nil { // sourcePod checked the container
		return ctrl.Result{}, err
	}
	cp.Status.Phase = cryov1.PhaseAssigned
	cp.Status.Node = pod.Spec.NodeName
	cp.Status.PodUID = string(pod.UID)
	cp.Status.CompatibilityKey = key
	cp.Status.ObservedGeneration = cp.Generation
	cp.Status.Requester = &cryov1.Requester{Username: cp.Annotations[cryov1.RequesterAnnotation], Groups: groups(cp)}
	meta.SetStatusCondition(&cp.Status.Conditions, metav1.Condition{Type: cryov1.ConditionAssigned, Status: metav1.ConditionTrue,
		Reason: "PodRunning", Message: "assigned to the agent on node " + pod.Spec.NodeName, ObservedGeneration: cp.Generation})
	if err := r.Status().Update(ctx, cp); err != nil {
		return ctrl.Result{}, err
	}
	return r.deadline(ctx, cp, now)
}

// sourcePod is the Checkpoint's pod, or the refusal that says why it
// cannot be checkpointed.
func (r *Reconciler) sourcePod(ctx context.Context, cp *cryov1.Checkpoint) (*corev1.Pod, *Refusal, error) {
	var pod corev1.Pod
	err := r.Pods.Get(ctx, types.NamespacedName{Namespace: cp.Namespace, Name: cp.Spec.PodName}, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil, &Refusal{Step: "assign", Reason: cryov1.ReasonPodMissing, Err: ErrPodMissing,
			Remedy: "name a pod of namespace " + cp.Namespace + " in spec.podName"}, nil
	case err != nil:
		return nil, nil, err
	}
	if !hasContainer(&pod, cp.Spec.Container) {
		return nil, &Refusal{Step: "assign", Reason: cryov1.ReasonContainerMissing, Err: ErrContainerMissing,
			Remedy: "name one of the pod's containers in spec.container: " + containerNames(&pod)}, nil
	}
	if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" || !running(&pod, cp.Spec.Container) {
		return nil, &Refusal{Step: "assign", Reason: cryov1.ReasonPodNotRunning, Err: ErrPodNotRunning,
			Remedy: "wait until container " + cp.Spec.Container + " runs (kubectl get pod " + pod.Name + "), then create the Checkpoint again"}, nil
	}
	return &pod, nil, nil
}

// requester refuses a Checkpoint that no admission webhook annotated:
// created while the webhook was not configured, nobody checked that its
// creator may read the pod's memory.
func requester(cp *cryov1.Checkpoint) *Refusal {
	if cp.Annotations[cryov1.RequesterAnnotation] != "" {
		return nil
	}
	return &Refusal{Step: "admit", Reason: "NotAdmitted", Err: ErrNotAdmitted,
		Remedy: "install cryo's Helm chart with controller.enabled=true and create the Checkpoint again"}
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func running(pod *corev1.Pod, name string) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == name {
			return s.State.Running != nil
		}
	}
	return false
}

func containerNames(pod *corev1.Pod) string {
	var n []string
	for _, c := range pod.Spec.Containers {
		n = append(n, c.Name)
	}
	return strings.Join(n, ", ")
}

func groups(cp *cryov1.Checkpoint) []string {
	g := cp.Annotations[cryov1.RequesterGroupsAnnotation]
	if g == "" {
		return nil
	}
	return strings.Split(g, ",")
}
