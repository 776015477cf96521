package admission

import (
	"context"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// scheduling is the patch that gives pod its RuntimeClass's scheduling,
// as the apiserver's RuntimeClass admission plugin would: that plugin
// runs before the webhooks, so it never saw the runtimeClassName this
// webhook sets, and without this a restored pod could land on a node
// where cryo is not ready. A nodeSelector that contradicts the class is
// a reason for a cold start.
func (h *Pods) scheduling(ctx context.Context, pod *corev1.Pod) ([]jsonpatch.JsonPatchOperation, string, error) {
	var rc nodev1.RuntimeClass
	err := h.Reader.Get(ctx, types.NamespacedName{Name: h.RuntimeClass}, &rc)
	switch {
	case apierrors.IsNotFound(err):
		return nil, "no RuntimeClass " + h.RuntimeClass + " in the cluster (install cryo's Helm chart)", nil
	case err != nil:
		return nil, "", err
	}
	if rc.Scheduling == nil {
		return nil, "", nil
	}
	var ops []jsonpatch.JsonPatchOperation
	sel := map[string]string{}
	for k, v := range rc.Scheduling.NodeSelector {
		if have, ok := pod.Spec.NodeSelector[k]; ok && have != v {
			return nil, fmt.Sprintf("the pod's nodeSelector %s=%s contradicts RuntimeClass %s (%s=%s)", k, have, h.RuntimeClass, k, v), nil
		}
		sel[k] = v
	}
	if len(sel) > 0 {
		ops = append(ops, setEntries(pod.Spec.NodeSelector != nil, "/spec/nodeSelector", sel)...)
	}
	if add := missing(pod.Spec.Tolerations, rc.Scheduling.Tolerations); len(add) > 0 {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/tolerations", append(append([]corev1.Toleration{}, pod.Spec.Tolerations...), add...)))
	}
	return ops, "", nil
}

// missing are the tolerations of want that have lacks.
func missing(have, want []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.MatchToleration(&w) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, w)
		}
	}
	return out
}
