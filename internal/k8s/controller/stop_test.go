package controller

import (
	"testing"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Only a Succeeded Checkpoint with leaveRunning false deletes its pod,
// and only once: a failure anywhere leaves the pod running.
func TestStopsSource(t *testing.T) {
	no, yes := false, true
	done := []metav1.Condition{{Type: cryov1.ConditionSourceDeleted, Status: metav1.ConditionTrue}}
	for _, c := range []struct {
		leave *bool
		phase cryov1.Phase
		conds []metav1.Condition
		want  bool
	}{
		{&no, cryov1.PhaseSucceeded, nil, true},
		{&no, cryov1.PhaseSucceeded, done, false},
		{&no, cryov1.PhaseFailed, nil, false},
		{&no, cryov1.PhasePushing, nil, false},
		{&yes, cryov1.PhaseSucceeded, nil, false},
		{nil, cryov1.PhaseSucceeded, nil, false},
	} {
		cp := &cryov1.Checkpoint{Spec: cryov1.CheckpointSpec{LeaveRunning: c.leave}, Status: cryov1.CheckpointStatus{Phase: c.phase, Conditions: c.conds}}
		if got := stopsSource(cp); got != c.want {
			t.Errorf("leaveRunning %v, phase %s, conditions %d: %v, want %v", c.leave, c.phase, len(c.conds), got, c.want)
		}
	}
}
