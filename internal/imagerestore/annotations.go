package imagerestore

import (
	"fmt"
	"strings"
)

// The annotations a container's OCI spec carries to start from a
// checkpoint image. In Kubernetes they are pod annotations, which
// containerd's CRI copies into every container's spec when the runtime
// handler lists them in pod_annotations ("cryo.io/*"). A pod annotation
// applies to all the pod's containers, so each has a per-container form,
// KEY.<container name>, which wins over the pod-wide one.
const (
	Prefix = "cryo.io/"
	// AnnImage names the checkpoint image by a digest-pinned reference
	// (host/name@sha256:…); a tag is refused (see Authorize).
	AnnImage = Prefix + "checkpoint-image"
	// AnnOnFailure is the policy when the restore cannot begin: "fail"
	// (the default) or "fresh".
	AnnOnFailure = Prefix + "on-restore-failure"
	// AnnCRIContainerName is where containerd's CRI puts the container's
	// name from the pod spec.
	AnnCRIContainerName = "io.kubernetes.cri.container-name"
	// AnnCRIContainerType is "sandbox" for a pod's sandbox (pause)
	// container and "container" for the others.
	AnnCRIContainerType = "io.kubernetes.cri.container-type"
	// AnnCRISandboxNamespace is where containerd's CRI (1.7 and 2.x) puts
	// the pod's Kubernetes namespace. CRI sets it after it has copied the
	// pod's annotations, so a pod cannot name another namespace with it.
	AnnCRISandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
)

// Policy is what happens to a container whose restore fails before any
// process was restored.
type Policy string

const (
	// PolicyFail: the container fails to be created, with the reason.
	PolicyFail Policy = "fail"
	// PolicyFresh: the container starts from its image as if there were no
	// checkpoint, and the reason is logged as a warning.
	PolicyFresh Policy = "fresh"
)

// Request is a container's restore from a checkpoint image, as its spec's
// annotations ask for it.
type Request struct {
	Ref       string // the checkpoint image
	OnFailure Policy
	Container string // the container's name (CRI), "" outside Kubernetes
	// Namespace is the pod's Kubernetes namespace, "" outside Kubernetes:
	// the node's policy allows repositories per namespace.
	Namespace string
}

// FromAnnotations reads the request from a container spec's annotations:
// ok is false when no checkpoint image is named. An unusable value is an
// ErrBadAnnotation; the policy it carries is still the one asked for (or
// fail), so that a caller can honour "fresh" for it. A pod's sandbox never
// restores: containerd copies the pod's annotations into its spec too.
func FromAnnotations(ann map[string]string) (req Request, ok bool, err error) {
	if ann[AnnCRIContainerType] == "sandbox" {
		return Request{OnFailure: PolicyFail}, false, nil
	}
	req.Container = ann[AnnCRIContainerName]
	req.Namespace = ann[AnnCRISandboxNamespace] // never per container: CRI's own key
	req.Ref = strings.TrimSpace(lookup(ann, AnnImage, req.Container))
	policy := lookup(ann, AnnOnFailure, req.Container)
	switch Policy(policy) {
	case "", PolicyFail:
		req.OnFailure = PolicyFail
	case PolicyFresh:
		req.OnFailure = PolicyFresh
	default:
		req.OnFailure = PolicyFail
		err = fmt.Errorf("annotation %s is %q, want %q or %q: %w", AnnOnFailure, policy, PolicyFail, PolicyFresh, ErrBadAnnotation)
	}
	if req.Ref == "" {
		return req, false, nil
	}
	return req, true, err
}

// lookup is the container's own KEY.<name> when it has one, else KEY.
func lookup(ann map[string]string, key, container string) string {
	if container != "" {
		if v, ok := ann[key+"."+container]; ok {
			return v
		}
	}
	return ann[key]
}
