package shim

import (
	"context"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// A pod's container restores within the kubelet's 2 minutes unless the
// node says otherwise; containerd's other clients keep the long default;
// a node's CRYO_RESTORE_TIMEOUT applies to both.
func TestRestoreDeadlineDefaults(t *testing.T) {
	pod := map[string]string{imagerestore.AnnCRIContainerType: "container"}
	since := time.Now()
	cases := []struct {
		cfg  config.Config
		ann  map[string]string
		want time.Duration
	}{
		{config.Config{}, pod, config.DefaultKubernetesRestoreTime},
		{config.Config{}, nil, config.DefaultRestoreTime},
		{config.Config{RestoreTimeout: 5 * time.Minute, RestoreTimeoutSet: true}, pod, 5 * time.Minute},
		{config.Config{RestoreTimeout: 5 * time.Minute, RestoreTimeoutSet: true}, nil, 5 * time.Minute},
	}
	for _, c := range cases {
		s := &service{cfg: c.cfg}
		d := s.restoreDeadline(c.ann, since)
		if d.Limit != c.want || !d.Since.Equal(since) {
			t.Errorf("annotations %v, timeout set %v: limit %s, want %s", c.ann, c.cfg.RestoreTimeoutSet, d.Limit, c.want)
		}
	}
	if config.DefaultKubernetesRestoreTime >= 2*time.Minute {
		t.Errorf("a pod's default %s is not under the kubelet's 2 minutes", config.DefaultKubernetesRestoreTime)
	}
}

// Start resumes the deadline that Create began: the time Create took is
// spent.
func TestStartDeadlineCarriesCreate(t *testing.T) {
	began := time.Now().Add(-time.Minute)
	ctx, cancel := startDeadline(context.Background(), pendingRestore{deadline: orchestrate.Deadline{Since: began, Limit: 90 * time.Second}})
	defer cancel()
	at, ok := ctx.Deadline()
	if !ok || !at.Equal(began.Add(90*time.Second)) {
		t.Fatalf("Start's deadline %s (%v), want Create's start plus 90s", at, ok)
	}
	if d, ok := orchestrate.RestoreDeadline(ctx); !ok || d.Limit != 90*time.Second {
		t.Fatalf("Start's context carries %+v, want the 90s limit", d)
	}
	ctx, cancel = startDeadline(context.Background(), pendingRestore{})
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a restore of containerd's own checkpoint got the image deadline")
	}
}
