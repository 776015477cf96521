package admission

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestNamesRefuseOtherNamespaces(t *testing.T) {
	for _, c := range []struct{ pod, secret, want string }{
		{"web-0", "", ""},
		{"web-0.a", "regcred", ""},
		{"other/web-0", "", "names another namespace"},
		{"web-0", "other/regcred", "names another namespace"},
		{"web-0", "other:regcred", "names another namespace"},
		{"Web_0", "", "is not an object name"},
	} {
		cp := &cryov1.Checkpoint{Spec: cryov1.CheckpointSpec{PodName: c.pod, PushSecretName: c.secret}}
		got := names(cp, "team")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("pod %q secret %q: %q, want %q", c.pod, c.secret, got, c.want)
		}
	}
}

// The requester's annotations are set over what the creator wrote, and
// the label's key is one JSON pointer token.
func TestRecordPatch(t *testing.T) {
	cp := &cryov1.Checkpoint{Spec: cryov1.CheckpointSpec{PodName: "web-0"}}
	cp.Annotations = map[string]string{cryov1.RequesterAnnotation: "admin"}
	cp.Labels = map[string]string{}
	ops := record(cp, authnv1.UserInfo{Username: "bob", Groups: []string{"a", "b"}})
	want := map[string]any{
		"/metadata/annotations/cryo.io~1requester":        "bob",
		"/metadata/annotations/cryo.io~1requester-groups": "a,b",
		"/metadata/labels/cryo.io~1source-pod":            "web-0",
	}
	if len(ops) != len(want) {
		t.Fatalf("ops %+v", ops)
	}
	for _, op := range ops {
		if op.Operation != "add" || want[op.Path] != op.Value {
			t.Errorf("op %+v not expected", op)
		}
	}
}

// The GPU requirement goes into every required term: the terms are ORed,
// so one term without it would let the pod onto any GPU.
func TestGPUAffinityAndsEveryTerm(t *testing.T) {
	a := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
		}}}}
	got := gpuAffinity(a, []cryov1.GPU{{Model: "NVIDIA-H200", Count: 1}})
	for i, term := range got.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		last := term.MatchExpressions[len(term.MatchExpressions)-1]
		if len(term.MatchExpressions) != 2 || last.Key != cryov1.GPUProductLabel || last.Values[0] != "NVIDIA-H200" {
			t.Errorf("term %d: %+v", i, term)
		}
	}
	if len(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions) != 1 {
		t.Error("the pod's own affinity was changed in place")
	}
	if got := gpuAffinity(nil, []cryov1.GPU{{Model: "X"}}); len(got.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) != 1 {
		t.Errorf("no affinity: %+v", got)
	}
}

// A name too long for a tag is refused before any access review: the
// agent could never push the image, after the kubelet stopped the pod.
func TestHandleRefusesInvalidTag(t *testing.T) {
	for _, c := range []struct{ name, repo, want string }{
		{strings.Repeat("a", 129), "r.example/app", "more than the 128"},
		{"first", "r.example/app:v1", "carries a tag"},
	} {
		raw, _ := json.Marshal(&cryov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "team"},
			Spec: cryov1.CheckpointSpec{PodName: "web-0", Container: "app", Repository: c.repo}})
		req := cradmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Namespace: "team", Object: runtime.RawExtension{Raw: raw}}}
		resp := (&Checkpoints{}).Handle(context.Background(), req)
		if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, c.want) {
			t.Errorf("name of %d characters, repository %s: allowed %v, %+v", len(c.name), c.repo, resp.Allowed, resp.Result)
		}
	}
}
