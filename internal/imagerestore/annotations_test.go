package imagerestore

import (
	"errors"
	"testing"
)

func TestFromAnnotations(t *testing.T) {
	for _, c := range []struct {
		name   string
		ann    map[string]string
		want   Request
		ok     bool
		badAnn bool
	}{
		{"none", map[string]string{"other": "x"}, Request{OnFailure: PolicyFail}, false, false},
		{"pod-wide", map[string]string{AnnImage: " reg.example/a:v1 ", AnnCRIContainerName: "main"},
			Request{Ref: "reg.example/a:v1", OnFailure: PolicyFail, Container: "main"}, true, false},
		{"per-container wins", map[string]string{AnnImage: "reg.example/a:v1", AnnImage + ".main": "reg.example/b@sha256:00",
			AnnOnFailure + ".main": "fresh", AnnCRIContainerName: "main"},
			Request{Ref: "reg.example/b@sha256:00", OnFailure: PolicyFresh, Container: "main"}, true, false},
		{"empty per-container opts out", map[string]string{AnnImage: "reg.example/a:v1", AnnImage + ".sidecar": "", AnnCRIContainerName: "sidecar"},
			Request{OnFailure: PolicyFail, Container: "sidecar"}, false, false},
		{"other container's key ignored", map[string]string{AnnImage + ".main": "reg.example/a:v1", AnnCRIContainerName: "sidecar"},
			Request{OnFailure: PolicyFail, Container: "sidecar"}, false, false},
		{"sandbox never restores", map[string]string{AnnImage: "reg.example/a:v1", AnnCRIContainerType: "sandbox"},
			Request{OnFailure: PolicyFail}, false, false},
		{"bad policy", map[string]string{AnnImage: "reg.example/a:v1", AnnOnFailure: "retry"},
			Request{Ref: "reg.example/a:v1", OnFailure: PolicyFail}, true, true},
		{"namespace from CRI", map[string]string{AnnImage: "reg.example/a:v1", AnnCRIContainerName: "main", AnnCRISandboxNamespace: "team-a"},
			Request{Ref: "reg.example/a:v1", OnFailure: PolicyFail, Container: "main", Namespace: "team-a"}, true, false},
		// CRI's key is read as it is: a per-container form of it is
		// nobody's, and outside Kubernetes the namespace is "".
		{"no per-container namespace", map[string]string{AnnImage: "reg.example/a:v1", AnnCRIContainerName: "main",
			AnnCRISandboxNamespace + ".main": "team-a"},
			Request{Ref: "reg.example/a:v1", OnFailure: PolicyFail, Container: "main"}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := FromAnnotations(c.ann)
			if got != c.want || ok != c.ok || errors.Is(err, ErrBadAnnotation) != c.badAnn {
				t.Fatalf("got %+v %v %v, want %+v %v bad=%v", got, ok, err, c.want, c.ok, c.badAnn)
			}
		})
	}
}

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
