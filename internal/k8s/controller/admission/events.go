package admission

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Component is the source the webhook's Events name.
const Component = "cryo-webhook"

// ReasonColdStart is the reason of the Event on a pod that starts cold.
const ReasonColdStart = "CryoColdStart"

// Events writes core/v1 Events directly: the pod does not exist yet when
// the webhook sees it, so a recorder's asynchronous broadcast would gain
// nothing, and a direct write can be tested.
type Events struct {
	Client client.Client
}

// ReasonRestoring is the reason of the Event on a pod that the webhook
// sent to restore from a Checkpoint: with it, a scale-up shows in
// `kubectl get events` which replicas restored, not only which did not.
const ReasonRestoring = "CryoRestoring"

// ColdStart records why pod starts cold.
func (e *Events) ColdStart(ctx context.Context, pod *corev1.Pod, checkpoint, why string) {
	e.record(ctx, pod, ReasonColdStart, corev1.EventTypeWarning, "cryo-cold-start-",
		"restore-from "+checkpoint+" not used, cold start: "+why)
}

// Restoring records that pod restores from checkpoint's image.
func (e *Events) Restoring(ctx context.Context, pod *corev1.Pod, checkpoint, image string) {
	e.record(ctx, pod, ReasonRestoring, corev1.EventTypeNormal, "cryo-restoring-",
		"restoring from Checkpoint "+checkpoint+" ("+image+")")
}

// record writes one Event about pod, on its controlling owner when it has
// one (a ReplicaSet's pods have no name yet at admission, and the owner is
// where a user looks), else on the pod by name.
func (e *Events) record(ctx context.Context, pod *corev1.Pod, reason, kind, prefix, msg string) {
	ref := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name}
	if ref.Name == "" {
		ref.Name = pod.GenerateName
	}
	if o := metav1.GetControllerOf(pod); o != nil {
		ref = corev1.ObjectReference{Kind: o.Kind, APIVersion: o.APIVersion, Namespace: pod.Namespace, Name: o.Name, UID: o.UID}
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: prefix, Namespace: pod.Namespace},
		InvolvedObject: ref, Reason: reason, Type: kind, Message: msg,
		Source:         corev1.EventSource{Component: Component},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "cryo.io/" + Component, ReportingInstance: Component,
	}
	if err := e.Client.Create(ctx, ev); err != nil {
		// An Event is a courtesy: the annotation on the pod says it too.
		logf.FromContext(ctx).Error(err, "record an event", "reason", reason, "pod", ref.Name)
	}
}
