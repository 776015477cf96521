package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is where a Checkpoint is in its life. Pending → Assigned (the
// controller) → Checkpointing → Pushing → Succeeded (the node agent);
// Failed from any phase but Succeeded.
// +kubebuilder:validation:Enum=Pending;Assigned;Checkpointing;Pushing;Succeeded;Failed
type Phase string

// The phases of a Checkpoint.
const (
	PhasePending       Phase = "Pending"
	PhaseAssigned      Phase = "Assigned"
	PhaseCheckpointing Phase = "Checkpointing"
	PhasePushing       Phase = "Pushing"
	PhaseSucceeded     Phase = "Succeeded"
	PhaseFailed        Phase = "Failed"
)

// Done reports whether the phase is final.
func (p Phase) Done() bool { return p == PhaseSucceeded || p == PhaseFailed }

// CheckpointSpec says which container to checkpoint and where the image
// goes. What it names (pod, container, repository, Secret) is immutable
// once created: the webhook checked the requester's rights on exactly
// those. Timeout, TTL and Keep may change.
// +kubebuilder:validation:XValidation:rule="has(self.pushSecretName) == has(oldSelf.pushSecretName)",message="pushSecretName is immutable: create another Checkpoint"
type CheckpointSpec struct {
	// PodName is the pod to checkpoint, in the Checkpoint's namespace. It
	// is a name, never namespace/name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: create another Checkpoint"
	PodName string `json:"podName"`

	// Container is the container of the pod to checkpoint.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: create another Checkpoint"
	Container string `json:"container"`

	// Repository is where the checkpoint image is pushed, without a tag
	// or digest, e.g. registry.example:5000/team/app. The agent picks
	// the tag; Status.Image pins the pushed image by digest.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: create another Checkpoint"
	Repository string `json:"repository"`

	// PushSecretName names a Secret of type kubernetes.io/dockerconfigjson
	// in the Checkpoint's namespace with credentials for Repository.
	// Empty: push without credentials.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="immutable: create another Checkpoint"
	PushSecretName string `json:"pushSecretName,omitempty"`

	// LeaveRunning leaves the pod running after the checkpoint. False
	// deletes the pod (exactly the one checkpointed, by UID) once the
	// image is pushed and the Checkpoint Succeeded, as a preempted job
	// expects: its owner (a Job, a StatefulSet) makes a new pod, which
	// may start from the image. A Checkpoint that fails never deletes
	// it. The requester needs the right to delete the pod.
	// +optional
	// +kubebuilder:default=true
	LeaveRunning *bool `json:"leaveRunning,omitempty"`

	// Timeout bounds the whole checkpoint, from creation to Succeeded;
	// past it the controller fails the Checkpoint.
	// +optional
	// +kubebuilder:default="10m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// TTL, when set, deletes the Checkpoint (and through the cleanup
	// finalizer its image tag) this long after it finished.
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// Keep is how many finished Checkpoints of the same source pod (label
	// cryo.io/source-pod) in this namespace to keep, newest first, this
	// one included; older ones are deleted when this one finishes. 0 keeps
	// all. It lives on the Checkpoint, not on the pod, because whoever
	// creates checkpoints decides how many registry images they pay for,
	// and a pod annotation would let the pod's owner decide it instead.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Keep *int32 `json:"keep,omitempty"`
}

// GPU describes the GPUs the checkpointed container used, of one model.
type GPU struct {
	// Model is the product name, as nvidia.com/gpu.product labels it on
	// the node (e.g. NVIDIA-H200).
	Model string `json:"model"`
	// Count is how many GPUs of this model the container used.
	Count int32 `json:"count"`
	// MemoryMiB is the memory of one GPU, in MiB.
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
}

// StepTiming is how long one step of the checkpoint took.
type StepTiming struct {
	// Step names the step (e.g. cuda-suspend, criu-dump, push).
	Step string `json:"step"`
	// Duration is how long it took.
	Duration metav1.Duration `json:"duration"`
}

// Requester is who created the Checkpoint, from the admission request.
type Requester struct {
	// Username is the requester's user name.
	Username string `json:"username"`
	// Groups are the requester's groups.
	// +optional
	Groups []string `json:"groups,omitempty"`
}

// Failure says why a Checkpoint failed and what to do.
type Failure struct {
	// Step is the step that failed (e.g. assign, checkpoint, push).
	Step string `json:"step"`
	// Cause is what went wrong; it starts with a reason word such as
	// PodMissing or Timeout.
	Cause string `json:"cause"`
	// Remedy is what the user can do about it.
	// +optional
	Remedy string `json:"remedy,omitempty"`
}

// CheckpointStatus is what the controller and the node agent report.
type CheckpointStatus struct {
	// Phase is where the Checkpoint is; empty means Pending.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Conditions are the standard conditions (Assigned, Ready, Failed).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the status was written for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Progress is how far the checkpoint is, in percent.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Progress int32 `json:"progress,omitempty"`

	// BytesDone and BytesTotal are the bytes of the step under way (the
	// image's build while Checkpointing, its push while Pushing) done
	// and in all; Progress moves with them. After Succeeded they are the
	// push's. 0: not known yet.
	// +optional
	BytesDone int64 `json:"bytesDone,omitempty"`
	// +optional
	BytesTotal int64 `json:"bytesTotal,omitempty"`

	// PodUID is the UID of the pod the controller assigned: the pod that
	// spec.leaveRunning false deletes, never a newer one of its name.
	// +optional
	PodUID string `json:"podUID,omitempty"`

	// Node is the node the pod runs on, set by the controller; the agent
	// on that node does the checkpoint.
	// +optional
	Node string `json:"node,omitempty"`

	// Image is the pushed checkpoint image, pinned by digest
	// (repository@sha256:...).
	// +optional
	Image string `json:"image,omitempty"`

	// ImageSize is the image's size in bytes, all layers.
	// +optional
	ImageSize int64 `json:"imageSize,omitempty"`

	// GPUs are the GPUs the container used, per model. Empty: no GPU.
	// +optional
	GPUs []GPU `json:"gpus,omitempty"`

	// DriverBranch is the NVIDIA driver's branch on the node (e.g. 580).
	// +optional
	DriverBranch string `json:"driverBranch,omitempty"`

	// CUDAVersion is the CUDA version the driver reports (e.g. 13.0).
	// +optional
	CUDAVersion string `json:"cudaVersion,omitempty"`

	// CryoVersion is the version of cryo that made the checkpoint.
	// +optional
	CryoVersion string `json:"cryoVersion,omitempty"`

	// StepTimings are the durations of the checkpoint's steps, in order.
	// +optional
	StepTimings []StepTiming `json:"stepTimings,omitempty"`

	// CompatibilityKey is the hash of the source container's restore
	// relevant spec (internal/k8s/compat); a pod may restore from this
	// checkpoint only if its container has the same key.
	// +optional
	CompatibilityKey string `json:"compatibilityKey,omitempty"`

	// Requester is who created the Checkpoint, copied by the controller
	// from the annotations the webhook set.
	// +optional
	Requester *Requester `json:"requester,omitempty"`

	// Failure says why the Checkpoint failed, when it did.
	// +optional
	Failure *Failure `json:"failure,omitempty"`

	// StartTime is when the agent began the checkpoint.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the Checkpoint reached Succeeded or Failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// Checkpoint checkpoints one container of a running pod into a container
// image, pinned by digest, that new pods can start from through the
// cryo.io/restore-from annotation.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cpt;cpts,categories=cryo
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.podName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=integer,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.image`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Checkpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CheckpointSpec   `json:"spec"`
	Status CheckpointStatus `json:"status,omitempty"`
}

// CheckpointList is a list of Checkpoints.
// +kubebuilder:object:root=true
type CheckpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Checkpoint `json:"items"`
}
