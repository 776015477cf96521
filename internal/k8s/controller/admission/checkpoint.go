package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"gomodules.xyz/jsonpatch/v2"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// CheckpointPath is where the Checkpoint webhook is served.
const CheckpointPath = "/mutate-cryo-io-v1alpha1-checkpoint"

// Checkpoints is the webhook on Checkpoint create.
type Checkpoints struct {
	// Client creates the SubjectAccessReviews.
	Client client.Client
}

// Handle checks and annotates one Checkpoint.
func (h *Checkpoints) Handle(ctx context.Context, req admission.Request) admission.Response {
	var cp cryov1.Checkpoint
	if err := json.Unmarshal(req.Object.Raw, &cp); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the Checkpoint: %w", err))
	}
	if why := names(&cp, req.Namespace); why != "" {
		return admission.Denied(why)
	}
	if err := cryov1.ValidateImageRef(&cp); err != nil {
		return admission.Denied(fmt.Sprintf("Checkpoint %s: %v", cp.Name, err))
	}
	if resp, ok := h.authorized(ctx, req, &cp); !ok {
		return resp
	}
	return admission.Patched("", record(&cp, req.UserInfo)...)
}

// names refuses anything but a plain name of the Checkpoint's own
// namespace: the agent reads both with its own rights, which reach every
// namespace, so a "other-ns/name" must never reach it.
func names(cp *cryov1.Checkpoint, ns string) string {
	if cp.Namespace != "" && cp.Namespace != ns {
		return fmt.Sprintf("Checkpoint %s: its namespace %q is not the request's %q", cp.Name, cp.Namespace, ns)
	}
	for field, v := range map[string]string{"spec.podName": cp.Spec.PodName, "spec.pushSecretName": cp.Spec.PushSecretName} {
		if v == "" && field == "spec.pushSecretName" {
			continue
		}
		if strings.ContainsAny(v, "/:") {
			return fmt.Sprintf("Checkpoint %s: %s %q names another namespace; a Checkpoint names a pod and a Secret of its own namespace %s only: create the Checkpoint in that namespace", cp.Name, field, v, ns)
		}
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			return fmt.Sprintf("Checkpoint %s: %s %q is not an object name (%s)", cp.Name, field, v, strings.Join(errs, "; "))
		}
	}
	return ""
}

// authorized asks the apiserver whether the requester may create
// pods/exec on the pod (a checkpoint reads all of the pod's memory, which
// exec already allows), get the push Secret (the agent pushes with
// it, which would otherwise lend its credentials to anyone), and, for
// spec.leaveRunning false, delete the pod (the controller deletes it
// with its own rights).
func (h *Checkpoints) authorized(ctx context.Context, req admission.Request, cp *cryov1.Checkpoint) (admission.Response, bool) {
	checks := []authzv1.ResourceAttributes{{Namespace: req.Namespace, Verb: "create", Resource: "pods", Subresource: "exec", Name: cp.Spec.PodName}}
	if cp.Spec.LeaveRunning != nil && !*cp.Spec.LeaveRunning {
		checks = append(checks, authzv1.ResourceAttributes{Namespace: req.Namespace, Verb: "delete", Resource: "pods", Name: cp.Spec.PodName})
	}
	if cp.Spec.PushSecretName != "" {
		checks = append(checks, authzv1.ResourceAttributes{Namespace: req.Namespace, Verb: "get", Resource: "secrets", Name: cp.Spec.PushSecretName})
	}
	for _, ra := range checks {
		ok, reason, err := h.allowed(ctx, req.UserInfo, ra)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, fmt.Errorf("Checkpoint %s: ask whether %s may %s: %w", cp.Name, req.UserInfo.Username, what(ra), err)), false
		}
		if !ok {
			return admission.Denied(fmt.Sprintf("Checkpoint %s: user %q may not %s%s; a checkpoint holds the pod's memory, so it needs the rights that read it: ask for a Role that allows it",
				cp.Name, req.UserInfo.Username, what(ra), reason)), false
		}
	}
	return admission.Response{}, true
}

func (h *Checkpoints) allowed(ctx context.Context, u authnv1.UserInfo, ra authzv1.ResourceAttributes) (bool, string, error) {
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		ResourceAttributes: &ra, User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra(u.Extra)}}
	if err := h.Client.Create(ctx, sar); err != nil {
		return false, "", err
	}
	reason := ""
	if sar.Status.Reason != "" {
		reason = " (" + sar.Status.Reason + ")"
	}
	return sar.Status.Allowed, reason, nil
}

func what(ra authzv1.ResourceAttributes) string {
	r := ra.Resource
	if ra.Subresource != "" {
		r += "/" + ra.Subresource
	}
	return fmt.Sprintf("%s %s %s in namespace %s", ra.Verb, r, ra.Name, ra.Namespace)
}

func extra(in map[string]authnv1.ExtraValue) map[string]authzv1.ExtraValue {
	if in == nil {
		return nil
	}
	out := make(map[string]authzv1.ExtraValue, len(in))
	for k, v := range in {
		out[k] = authzv1.ExtraValue(v)
	}
	return out
}

// record writes who asked, overwriting whatever the creator wrote there,
// and labels the Checkpoint with its source pod for `kubectl get -l`.
// The patch names only these keys: a round trip through the Go types
// would drop fields newer than them.
func record(cp *cryov1.Checkpoint, u authnv1.UserInfo) []jsonpatch.JsonPatchOperation {
	ops := setEntries(cp.Annotations != nil, "/metadata/annotations", map[string]string{
		cryov1.RequesterAnnotation:       u.Username,
		cryov1.RequesterGroupsAnnotation: strings.Join(u.Groups, ","),
	})
	if len(validation.IsValidLabelValue(cp.Spec.PodName)) == 0 {
		ops = append(ops, setEntries(cp.Labels != nil, "/metadata/labels", map[string]string{cryov1.SourceLabel: cp.Spec.PodName})...)
	} else if _, ok := cp.Labels[cryov1.SourceLabel]; ok {
		ops = append(ops, jsonpatch.NewOperation("remove", "/metadata/labels/"+escape(cryov1.SourceLabel), nil))
	}
	return ops
}
