package orchestrate

import (
	"context"
	"testing"
)

// For the external tests (package orchestrate_test), which may import the
// front ends' words: those import this package, so its own tests cannot.

// CheckpointFailure is the error of a checkpoint of id, with its image in
// dir, that failed at step with err, as the runner reports it.
func CheckpointFailure(o *Orchestrator, id, dir string, step StepName, err error) error {
	return newCheckpoint(o.env(), Target{ID: id}, dir, false, nil).runner(nil).fail(context.Background(), step, err)
}

// TestConfig keeps the tests' locks in their own directory.
var TestConfig Option = testConfig

// CRIULog writes a failed dump's log in dir whose real cause is cause.
func CRIULog(t *testing.T, dir, cause string) string { return criuLog(t, dir, cause) }

// Sleeper is a target of one sleeping process, killed after the test.
func Sleeper(t *testing.T) Target { return sleeper(t) }
