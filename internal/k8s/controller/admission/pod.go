package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/internal/k8s/compat"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// PodPath is where the pod webhook is served.
const PodPath = "/mutate-v1-pod"

// Pods is the webhook on pod create.
type Pods struct {
	// Reader reads Checkpoints straight from the apiserver: a cache could
	// miss a Checkpoint that just succeeded and start the pod cold.
	Reader client.Reader
	// Events records why a pod starts cold.
	Events *Events
	// RuntimeClass is the RuntimeClass a restored pod runs under.
	RuntimeClass string
}

// Handle starts a pod from its Checkpoint, or lets it start cold. It
// never refuses a pod: the pod's author asked for a faster start, not
// for a condition on starting at all.
func (h *Pods) Handle(ctx context.Context, req admission.Request) admission.Response {
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return admission.Allowed("not a pod cryo can read: " + err.Error())
	}
	name := pod.Annotations[cryov1.RestoreFromAnnotation]
	if name == "" {
		return admission.Allowed("")
	}
	pod.Namespace = req.Namespace
	ops, why, err := h.restore(ctx, &pod, name)
	if err != nil {
		why = "cryo could not read Checkpoint " + name + ": " + err.Error()
	}
	dry := req.DryRun != nil && *req.DryRun // sideEffects: NoneOnDryRun
	if why != "" {
		if !dry {
			h.Events.ColdStart(ctx, &pod, name, why)
		}
		ops = setEntries(pod.Annotations != nil, "/metadata/annotations", map[string]string{cryov1.ColdStartAnnotation: why})
		return admission.Patched("cold start: "+why, ops...)
	}
	if !dry {
		h.Events.Restoring(ctx, &pod, name, imageOf(ops))
	}
	return admission.Patched("restored from Checkpoint "+name, ops...)
}

// restore is the patch that starts pod from Checkpoint name, or why it
// cannot.
func (h *Pods) restore(ctx context.Context, pod *corev1.Pod, name string) ([]jsonpatch.JsonPatchOperation, string, error) {
	var cp cryov1.Checkpoint
	err := h.Reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &cp)
	switch {
	case apierrors.IsNotFound(err):
		return nil, "no Checkpoint " + name + " in namespace " + pod.Namespace, nil
	case err != nil:
		return nil, "", err
	}
	if cp.Status.Phase != cryov1.PhaseSucceeded {
		return nil, fmt.Sprintf("Checkpoint %s is %s, not Succeeded", name, orPending(cp.Status.Phase)), nil
	}
	if !strings.Contains(cp.Status.Image, "@sha256:") {
		return nil, fmt.Sprintf("Checkpoint %s has no image pinned by digest (%q)", name, cp.Status.Image), nil
	}
	container := cp.Spec.Container
	if c := pod.Annotations[cryov1.RestoreContainerAnnotation]; c != "" {
		container = c
	}
	idx := index(pod, container)
	if idx < 0 {
		return nil, "the pod has no container " + container + " to restore Checkpoint " + name + " into", nil
	}
	key, err := compat.Key(&pod.Spec, container)
	if err != nil {
		return nil, "", err
	}
	if key != cp.Status.CompatibilityKey {
		return nil, fmt.Sprintf("container %s differs from the one Checkpoint %s was taken of (compatibility key %s, the checkpoint's %s): image, command, args, env, ports, mounts, GPUs or security context changed",
			container, name, short(key), short(cp.Status.CompatibilityKey)), nil
	}
	sched, why, err := h.scheduling(ctx, pod)
	if why != "" || err != nil {
		return nil, why, err
	}
	return append(h.patch(pod, idx, &cp), sched...), "", nil
}

// patch replaces the container's image by the checkpoint's, runs the pod
// under cryo's RuntimeClass and, for a GPU checkpoint, on nodes with the
// same GPU model: the driver restores onto the same model only.
func (h *Pods) patch(pod *corev1.Pod, idx int, cp *cryov1.Checkpoint) []jsonpatch.JsonPatchOperation {
	ops := []jsonpatch.JsonPatchOperation{
		jsonpatch.NewOperation("replace", "/spec/containers/"+strconv.Itoa(idx)+"/image", cp.Status.Image),
		jsonpatch.NewOperation("add", "/spec/runtimeClassName", h.RuntimeClass),
	}
	if len(cp.Status.GPUs) > 0 {
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/affinity", gpuAffinity(pod.Spec.Affinity, cp.Status.GPUs)))
	}
	return append(ops, setEntries(pod.Annotations != nil, "/metadata/annotations", map[string]string{cryov1.RestoredFromAnnotation: cp.Name})...)
}

// gpuAffinity adds "nvidia.com/gpu.product In <models>" to every required
// term (terms are ORed, so the requirement goes into each), keeping the
// pod's own affinity.
func gpuAffinity(a *corev1.Affinity, gpus []cryov1.GPU) *corev1.Affinity {
	out := &corev1.Affinity{}
	if a != nil {
		out = a.DeepCopy()
	}
	if out.NodeAffinity == nil {
		out.NodeAffinity = &corev1.NodeAffinity{}
	}
	req := out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) == 0 {
		req = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	var models []string
	for _, g := range gpus {
		models = append(models, g.Model)
	}
	for i := range req.NodeSelectorTerms {
		t := &req.NodeSelectorTerms[i]
		t.MatchExpressions = append(t.MatchExpressions, corev1.NodeSelectorRequirement{
			Key: cryov1.GPUProductLabel, Operator: corev1.NodeSelectorOpIn, Values: models})
	}
	out.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = req
	return out
}

func index(pod *corev1.Pod, name string) int {
	for i, c := range pod.Spec.Containers {
		if c.Name == name {
			return i
		}
	}
	return -1
}

func orPending(p cryov1.Phase) string {
	if p == "" {
		return string(cryov1.PhasePending)
	}
	return string(p)
}

func short(key string) string {
	if len(key) > 15 {
		return key[:15]
	}
	return key
}

// imageOf is the image the patch gives the restored container.
func imageOf(ops []jsonpatch.JsonPatchOperation) string {
	for _, op := range ops {
		if strings.HasSuffix(op.Path, "/image") {
			if s, ok := op.Value.(string); ok {
				return s
			}
		}
	}
	return ""
}
