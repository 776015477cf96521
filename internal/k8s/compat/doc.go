// Package compat computes a Checkpoint's compatibility key: a hash of
// what decides whether a restore of one container is faithful, read from
// a pod's spec. The controller stores the key of the source pod's
// container in Checkpoint.Status.CompatibilityKey; the pod webhook
// restores a new pod only if its container has the same key.
//
// The key must be equal for the source pod as the apiserver returns it
// and for a new replica's pod as it reaches admission, although the two
// differ in ways that do not matter: the apiserver's defaults (protocol
// TCP, fieldRef apiVersion v1, requests copied from limits, an empty
// security context), the order of sets (ports, mounts, capabilities),
// quantities written differently ("1" or "1000m") and per-pod names
// (the service account token's volume is kube-api-access-<random>). So
// the key hashes a canonical form, not the objects: each field reduced to
// what the kernel, the kubelet or the process sees. Lists whose order
// means something (command, args, env, envFrom) keep their order.
package compat
