package hook

import "fmt"

// The annotations that name a container's hooks. In Kubernetes they are
// pod annotations, which containerd's CRI copies into the container's
// spec when the runtime handler lists "cryo.io/*" in pod_annotations, as
// for the other cryo.io annotations; KEY.<container name> wins over KEY,
// so that one container of a pod can have its own.
const (
	AnnPreCheckpoint        = "cryo.io/pre-checkpoint"
	AnnPostRestore          = "cryo.io/post-restore"
	AnnPreCheckpointTimeout = "cryo.io/pre-checkpoint-timeout"
	AnnPostRestoreTimeout   = "cryo.io/post-restore-timeout"
	// annContainerName is where containerd's CRI puts the container's name.
	annContainerName = "io.kubernetes.cri.container-name"
)

// Hooks are a container's hooks; nil: none.
type Hooks struct {
	Pre, Post *Spec
}

// FromAnnotations reads a container's hooks from its spec's annotations.
// A hook that does not parse is an error naming the annotation: a
// checkpoint asked to quiesce a server first must not go on without it.
func FromAnnotations(ann map[string]string) (Hooks, error) {
	name := ann[annContainerName]
	pre, err := fromAnnotation(ann, name, AnnPreCheckpoint, AnnPreCheckpointTimeout)
	if err != nil {
		return Hooks{}, err
	}
	post, err := fromAnnotation(ann, name, AnnPostRestore, AnnPostRestoreTimeout)
	if err != nil {
		return Hooks{}, err
	}
	return Hooks{Pre: pre, Post: post}, nil
}

func fromAnnotation(ann map[string]string, container, key, timeoutKey string) (*Spec, error) {
	text, ok := lookup(ann, key, container)
	if !ok {
		if _, t := lookup(ann, timeoutKey, container); t {
			return nil, fmt.Errorf("annotation %s without %s: %w", timeoutKey, key, ErrSyntax)
		}
		return nil, nil
	}
	s, err := Parse(text)
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", key, err)
	}
	if t, ok := lookup(ann, timeoutKey, container); ok {
		if s.Timeout, err = ParseTimeout(t); err != nil {
			return nil, fmt.Errorf("annotation %s: %w", timeoutKey, err)
		}
	}
	return &s, nil
}

// lookup is the container's own KEY.<name> when it has one, else KEY.
func lookup(ann map[string]string, key, container string) (string, bool) {
	if container != "" {
		if v, ok := ann[key+"."+container]; ok {
			return v, true
		}
	}
	v, ok := ann[key]
	return v, ok
}
