package controller

import (
	"errors"
	"fmt"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
)

// Why the controller fails a Checkpoint; each is wrapped in a *Refusal.
var (
	ErrPodMissing       = errors.New("the pod does not exist")
	ErrPodNotRunning    = errors.New("the pod is not running")
	ErrContainerMissing = errors.New("the pod has no such container")
	ErrTimeout          = errors.New("the checkpoint ran past its timeout")
	ErrNotAdmitted      = errors.New("the Checkpoint has no requester: cryo's admission webhook did not see it")
)

// Refusal is a Checkpoint the controller failed: which one, at which
// step, why and what to do. It becomes the Checkpoint's Status.Failure.
type Refusal struct {
	Checkpoint string // namespace/name
	Container  string
	Step       string
	Reason     string // a v1alpha1 Reason*, the Failed condition's reason
	Remedy     string
	Err        error
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("checkpoint %s of container %s, step %s: %v (%s)", r.Checkpoint, r.Container, r.Step, r.Err, r.Remedy)
}

func (r *Refusal) Unwrap() error { return r.Err }

// failure is the refusal as the API reports it.
func (r *Refusal) failure() *cryov1.Failure {
	return &cryov1.Failure{Step: r.Step, Cause: r.Reason + ": " + r.Err.Error(), Remedy: r.Remedy}
}
