// Package admission holds cryo's admission webhooks, served by the
// controller's process.
//
//   - Checkpoints (mutating, on create, failurePolicy Fail): refuses a
//     Checkpoint whose pod or push Secret is not a plain name of its own
//     namespace, or whose requester may not create pods/exec on the pod
//     (or get the push Secret), asked through SubjectAccessReviews; then
//     records the requester in the annotations. One mutating webhook both
//     checks and records, because a validating webhook cannot write, and
//     a check in a second webhook would see the object only after every
//     other mutating webhook could have changed the pod's name.
//   - Pods (mutating, on create, failurePolicy Ignore): a pod annotated
//     cryo.io/restore-from starts from the named Checkpoint if it
//     Succeeded and its compatibility key matches; otherwise it is left
//     to a cold start, with an Event that says why. A webhook that is
//     down therefore means cold starts, never pods that cannot start.
package admission
