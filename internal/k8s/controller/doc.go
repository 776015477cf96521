// Package controller is cryo's cluster front end, `cryo-k8s controller`:
// one process, a controller-runtime manager, that runs the Checkpoint
// controller and serves the admission webhooks (package admission).
//
// The controller assigns a new Checkpoint to its pod's node for the node
// agent there, fails it when its pod cannot be checkpointed or when its
// timeout passes, and deletes old Checkpoints by their count (Spec.Keep)
// and age (Spec.TTL). It never touches a node or a registry: what a
// Checkpoint left there is the agent's to delete, behind the finalizer
// v1alpha1.CleanupFinalizer.
package controller
