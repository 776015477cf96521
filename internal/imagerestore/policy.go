package imagerestore

import (
	"fmt"
	"strings"

	godigest "github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/registry"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/ociimage"
)

// The shim pulls a checkpoint image on a pod's behalf, from the host's
// network and with the node's identity, and the kubelet's checks of who
// may use which image do not see it. So the node's policy
// (config.AnnotationPolicy) decides, before anything is looked up or
// fetched and again at every restore: the path must be on, the reference
// pinned by digest, and its repository allowed for the pod's namespace;
// the pull is anonymous unless the namespace may use the node's
// credentials, and over HTTPS unless the registry is listed as insecure.

// Source is a checkpoint image a restore is allowed to use, and how to
// fetch it.
type Source struct {
	Ref       string // canonical: host/name@digest (a tag given with the digest is dropped)
	Digest    godigest.Digest
	Namespace string
	// NodeCredentials: the pull may use the node's registry auth files.
	NodeCredentials bool
	Remote          ociimage.RemoteOptions
}

// Authorize applies the node's policy to req; id names the container in
// errors, each a *report.StepError with the remedy.
func Authorize(req Request, id string, o Options) (Source, error) {
	const step = "check the node's policy for checkpoint images"
	if o.PolicyErr != nil {
		return Source{}, stepError(id, step, fmt.Errorf("%w: %w", o.PolicyErr, ErrRestoreOff),
			"the node's admin must fix the policy file that "+config.EnvAnnotationRestore+" names in containerd's environment (`cryo doctor` checks it; docs/kubernetes.md)")
	}
	if !o.Policy.Enabled {
		return Source{}, stepError(id, step, fmt.Errorf("%s names %s: %w", AnnImage, req.Ref, ErrRestoreOff),
			"the node's admin must enable it: a policy file with \"enabled\": true and the pod's namespace allowed, named by "+
				config.EnvAnnotationRestore+" in containerd's environment (docs/kubernetes.md); or remove the annotation")
	}
	ref, err := pinnedRef(req.Ref)
	if err != nil {
		return Source{}, stepError(id, "check the checkpoint image reference "+req.Ref, err,
			"name the image by its digest, host/name@sha256:… (`cryo image push REF` and `cryo image pull REF` print it; `cryo image ls --json` lists it)")
	}
	repo := ref.Registry + "/" + ref.Repository
	rule, ok := o.Policy.Allows(req.Namespace, repo)
	if !ok {
		return Source{}, stepError(id, "check the node's policy for "+ref.String(),
			fmt.Errorf("the node's policy (%s) does not allow %s to restore from %s: %w", o.Policy.Source, nsLabel(req.Namespace), repo, ErrNotAllowed),
			"ask the node's admin to list the repository under the namespace in that file, or name an image of a repository listed there")
	}
	d, _ := ref.Digest()
	src := Source{Ref: ref.String(), Digest: d, Namespace: req.Namespace, NodeCredentials: rule.UseNodeCredentials}
	// Plain HTTP only when listed, never inferred from a loopback address:
	// on the host's network, loopback reaches the node's own services.
	src.Remote = ociimage.RemoteOptions{PlainHTTP: o.Policy.Insecure(ref.Registry), NoLoopbackHTTP: true}
	if rule.UseNodeCredentials {
		src.Remote.AuthFiles = o.AuthFiles
	}
	return src, nil
}

// pinnedRef parses ref and requires a digest: a tag is whatever the
// registry (or the node's store) says it is at the time of the pull.
func pinnedRef(ref string) (registry.Reference, error) {
	r, err := registry.ParseReference(ref)
	if err != nil {
		return r, fmt.Errorf("%q is not an image reference (want host[:port]/name@sha256:…): %v: %w", ref, err, ErrBadAnnotation)
	}
	if !strings.Contains(ref, "@") {
		return r, fmt.Errorf("%s names no digest, only a tag (latest if none), which can be moved; this node restores only images pinned by digest: %w", ref, ErrNotPinned)
	}
	return r, nil // ParseReference has validated the digest after "@"
}

// nsLabel names a namespace in messages.
func nsLabel(ns string) string {
	if ns == "" {
		return `containers outside Kubernetes (namespace "")`
	}
	return fmt.Sprintf("namespace %q", ns)
}
