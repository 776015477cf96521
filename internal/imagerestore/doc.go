// Package imagerestore prepares a container's restore from a checkpoint
// image named by reference: it checks the request against the node's
// policy (Authorize: the path is off unless the node opts in, then only
// digest-pinned images of the repositories allowed to the pod's
// namespace), finds the pinned image in cryo's local store or pulls it
// (anonymously unless the namespace may use the node's credentials, over
// HTTPS unless the registry is listed as insecure), checks that it is the
// pinned image, refuses an image whose processes did not come from a
// container, unpacks and verifies it into a private work directory, and
// applies its rootfs diff to the new container's root filesystem.
//
// It is the part of a restore that is the same for every front end that
// restores from an image reference. Fetch and Fetched.Unpack are the one
// path from a reference to a verified work directory: `cryo image restore`
// calls them with its flags (pull or local, decryption keys, its --dir,
// its checks of the manifest before the unpack), and Prepare calls them
// behind Authorize for the shim's Create of a container whose spec carries
// the annotation AnnImage (a Kubernetes pod in cryo's RuntimeClass), and
// later a pod-level restore (KEP-5823's RestorePod), once per container.
// The restore itself (the host check, runc restore, CUDA resume) stays
// the front end's.
package imagerestore
