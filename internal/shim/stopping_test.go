package shim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"

	"github.com/cryo-gpu/cryo/internal/lock"
)

// A signalled shim's shutdown callbacks (the runc service's) wait for the
// checkpoint in flight, and the shim refuses new work meanwhile.
func TestShutdownWaitsForRuns(t *testing.T) {
	_, sd := shutdown.WithShutdown(context.Background())
	held, err := lock.Target(t.TempDir(), "checkpoint", "c")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	s := &service{busy: map[string]*lock.Lock{"c": held}, restores: map[string]pendingRestore{}}
	d := &drainingShutdown{Service: sd}
	d.drain = func() { s.drain(context.Background()) }
	ran := make(chan struct{})
	d.RegisterCallback(func(context.Context) error { close(ran); return nil })

	s.markStopping(context.Background(), "SIGTERM")
	sd.Shutdown()
	select {
	case <-ran:
		t.Fatal("a shutdown callback ran while a checkpoint was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	if err := s.stoppingErr("d", "resume"); !errors.Is(classify(err), errdefs.ErrUnavailable) {
		t.Errorf("a stopping shim's resume: %v, want unavailable", err)
	}

	s.mu.Lock()
	delete(s.busy, "c")
	s.mu.Unlock()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the shutdown callbacks did not run once the checkpoint ended")
	}
	<-sd.Done()
}
