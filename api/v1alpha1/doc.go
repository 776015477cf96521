// Package v1alpha1 is cryo's Kubernetes API, group cryo.io, version
// v1alpha1: the Checkpoint object a user creates to checkpoint one
// container of a running pod into a container image, and the names
// (annotations, finalizer, labels) that the controller, the admission
// webhooks and the node agent share.
//
// The split of work around one Checkpoint:
//
//   - The mutating webhook on Checkpoint create records who asked
//     (Status is not writable at create, so the requester goes into the
//     annotations RequesterAnnotation and RequesterGroupsAnnotation) and
//     refuses a requester who may not create pods/exec on the pod.
//   - The controller assigns the Checkpoint to the node of its pod
//     (Status.Node, phase Assigned), fails it when the pod is missing,
//     not running or lacks the container, enforces Spec.Timeout, and
//     deletes old Checkpoints per Spec.Keep and Spec.TTL.
//   - The node agent on Status.Node takes a Checkpoint in phase Assigned
//     through Checkpointing and Pushing to Succeeded or Failed, and fills
//     in everything it measured (image, GPUs, driver, sizes, timings).
//
// The agent's side of the contract:
//
//   - It acts only on Checkpoints whose Status.Node is its node and whose
//     phase is Assigned or later, never on Pending ones (the controller
//     has not checked the requester yet).
//   - It writes the status through the status subresource with the
//     object's resourceVersion (Status().Update or a patch with an
//     optimistic lock), so that a timeout the controller wrote meanwhile
//     wins; it leaves Node, CompatibilityKey and Requester as they are.
//   - On Succeeded it sets Image (repository@sha256:…), CompletionTime and
//     GPUs with the model as nvidia.com/gpu.product names it (the pod
//     webhook requires that label on restored pods); on Failed, Failure
//     with Step, Cause and Remedy, and CompletionTime.
//   - It handles CleanupFinalizer as that constant's comment says.
//   - Its rights: checkpoints get, list, watch, patch; checkpoints/status
//     get, update, patch; secrets get (the push Secret); events create.
//
// +kubebuilder:object:generate=true
// +groupName=cryo.io
package v1alpha1
