package v1alpha1

// Names shared by the controller, the webhooks and the node agent. They
// are part of the API: changing one breaks objects already stored.
const (
	// RestoreFromAnnotation on a pod (or a pod template) names a
	// Checkpoint of the pod's namespace to start the pod from. The pod
	// webhook acts on it only if the Checkpoint Succeeded and its
	// Status.CompatibilityKey matches the pod's container; otherwise the
	// pod starts cold and an Event says why.
	RestoreFromAnnotation = "cryo.io/restore-from"

	// RestoredFromAnnotation is set by the pod webhook on a pod it
	// mutated: the Checkpoint's name, for the reader and the agent.
	RestoredFromAnnotation = "cryo.io/restored-from"

	// RestoreContainerAnnotation optionally names the container of a
	// multi-container pod that restore-from applies to; by default it is
	// the Checkpoint's Spec.Container.
	RestoreContainerAnnotation = "cryo.io/restore-container"

	// RequesterAnnotation holds the user name of whoever created the
	// Checkpoint, set by the Checkpoint webhook from the admission
	// request's userInfo; any value the creator sent is overwritten.
	RequesterAnnotation = "cryo.io/requester"

	// RequesterGroupsAnnotation holds the requester's groups, joined by
	// commas, set with RequesterAnnotation.
	RequesterGroupsAnnotation = "cryo.io/requester-groups"

	// SourceLabel is set by the Checkpoint webhook to the pod's name, so
	// that retention lists the Checkpoints of one source with a label
	// selector (see CheckpointSpec.Keep).
	SourceLabel = "cryo.io/source-pod"

	// CleanupFinalizer is put on every Checkpoint by the controller. The
	// contract with the node agent:
	//
	//   - When a Checkpoint carrying it is deleted (by a user, or by the
	//     controller's retention), the agent on Status.Node deletes what
	//     the checkpoint left behind: the registry tag or manifest of
	//     Status.Image (with the push Secret of Spec.PushSecretName) and
	//     the kubelet's checkpoint archive on the node. Then it removes
	//     this finalizer, and only this one.
	//   - A Checkpoint that was never assigned (Status.Node empty) has
	//     nothing on any node: the controller removes the finalizer
	//     itself.
	//   - The agent removes the finalizer even when the cleanup fails in
	//     a way retrying cannot fix (the tag is already gone, the
	//     registry refuses deletes), and records a Warning Event on the
	//     Checkpoint that says what was left.
	CleanupFinalizer = "cryo.io/cleanup"

	// FieldManager is the field manager of cryo's writes.
	FieldManager = "cryo"
)

// Condition types of Checkpoint.Status.Conditions.
const (
	// ConditionAssigned: the controller assigned the Checkpoint to a node.
	ConditionAssigned = "Assigned"
	// ConditionReady: the checkpoint image is pushed and pinned by digest.
	ConditionReady = "Ready"
	// ConditionFailed: the Checkpoint failed; Status.Failure says where.
	ConditionFailed = "Failed"
	// ConditionSourceDeleted: with spec.leaveRunning false, whether the
	// source pod was deleted after the push (reason Deleted), or why not
	// (PodGone: it was gone or replaced already).
	ConditionSourceDeleted = "SourceDeleted"
)

// Reasons the controller sets on a failed Checkpoint (Failure.Cause
// names them, with words after a colon).
const (
	ReasonPodMissing       = "PodMissing"
	ReasonPodNotRunning    = "PodNotRunning"
	ReasonContainerMissing = "ContainerMissing"
	ReasonTimeout          = "Timeout"
	ReasonNotCompatible    = "NotCompatible"
	// ReasonInvalidTag: the image reference (spec.repository and the
	// Checkpoint's name as the tag) cannot be pushed.
	ReasonInvalidTag = "InvalidTag"
)

// ColdStartAnnotation is set by the pod webhook on a pod that named a
// Checkpoint in RestoreFromAnnotation but starts cold: why, in words. An
// Event on the pod's owner (or the pod) says the same.
const ColdStartAnnotation = "cryo.io/cold-start"

// GPUProductLabel is the node label (NVIDIA GPU feature discovery's) that
// a restored pod's required node affinity matches against the
// checkpoint's GPU model.
const GPUProductLabel = "nvidia.com/gpu.product"
