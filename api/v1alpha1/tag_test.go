package v1alpha1

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateImageRef(t *testing.T) {
	long := strings.Repeat("a", MaxTagLength+1)
	for _, c := range []struct {
		name, generate, repo, want string
	}{
		{name: "first", repo: "registry.example:5000/team/app"},
		{name: strings.Repeat("a", MaxTagLength), repo: "r.example/app"},
		{name: long, repo: "r.example/app", want: "more than the 128"},
		{generate: strings.Repeat("g", MaxTagLength-4), repo: "r.example/app", want: "more than the 128"},
		{generate: "trainer-", repo: "r.example/app"},
		{name: ".hidden", repo: "r.example/app", want: "not a valid image tag"},
		{name: "first", repo: "r.example/app:v1", want: "carries a tag"},
		{name: "first", repo: "R.example/App", want: "spec.repository"},
	} {
		cp := &Checkpoint{ObjectMeta: metav1.ObjectMeta{Name: c.name, GenerateName: c.generate}, Spec: CheckpointSpec{Repository: c.repo}}
		err := ValidateImageRef(cp)
		if c.want == "" {
			if err != nil {
				t.Errorf("%q %q: %v", c.name, c.repo, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidTag) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q/%q %q: %v, want %q", c.name, c.generate, c.repo, err, c.want)
		}
	}
}
