package controller

import (
	"sort"
	"testing"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// newer orders by completion, then creation, then name: the same total
// order in every round, so two rounds never keep different sets.
func TestNewerOrder(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(base.Add(d)); return &t }
	mk := func(name string, created, done time.Duration) *cryov1.Checkpoint {
		cp := &cryov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: *at(created)}}
		if done >= 0 {
			cp.Status.CompletionTime = at(done)
		}
		return cp
	}
	list := []*cryov1.Checkpoint{mk("a", 0, 5), mk("b", 0, 9), mk("c", 1, 5), mk("d", 7, -1), mk("e", 1, 5)}
	sort.Slice(list, func(i, j int) bool { return newer(list[i], list[j]) })
	var got string
	for _, cp := range list {
		got += cp.Name
	}
	if got != "bdeca" {
		t.Fatalf("order %s, want bdeca", got)
	}
}
