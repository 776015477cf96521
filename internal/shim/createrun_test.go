package shim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs/pkg/errgrpc"

	"github.com/cryo-gpu/cryo/internal/imagerestore"

	"github.com/cryo-gpu/cryo/internal/lock"
)

// creatingRunc is fakeRunc that also creates tasks.
type creatingRunc struct{ *fakeRunc }

func (f creatingRunc) Create(_ context.Context, r *taskv3.CreateTaskRequest) (*taskv3.CreateTaskResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "create")
	f.status = task.Status_CREATED
	return &taskv3.CreateTaskResponse{Pid: 42}, nil
}

func creating() (*service, *fakeRunc) {
	f := &fakeRunc{status: task.Status_UNKNOWN}
	return &service{TTRPCTaskService: creatingRunc{f}, restores: map[string]pendingRestore{}, busy: map[string]*lock.Lock{}}, f
}

// checkedCreate is a restore's Create as the shim's own: checks that stop
// at their next step once ctx ends (checked is closed when they have
// begun, and they last until release), then the runc service's create and
// the record for Start of a restore with work directory work.
func checkedCreate(s *service, r *taskv3.CreateTaskRequest, work *imagerestore.Prepared, checked chan<- struct{}, release <-chan struct{}) func(context.Context) (*taskv3.CreateTaskResponse, error) {
	return func(ctx context.Context) (*taskv3.CreateTaskResponse, error) {
		s.atStep(createRunOf(ctx), "verify")
		close(checked)
		<-release
		if err := context.Cause(ctx); err != nil {
			work.Remove()
			return nil, toGRPC(err, false)
		}
		resp, err := s.createTask(ctx, r)
		if err != nil {
			return nil, err
		}
		pending := pendingRestore{work: work}
		if err := s.commitCreate(ctx, r, pending); err != nil {
			return nil, toGRPC(err, false)
		}
		return resp, nil
	}
}

func workDir(t *testing.T) *imagerestore.Prepared {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "work")
	if err := os.MkdirAll(filepath.Join(dir, "criu"), 0o700); err != nil {
		t.Fatal(err)
	}
	return &imagerestore.Prepared{Dir: dir}
}

func wantGone(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Lstat(dir); err == nil {
		t.Errorf("%s is left", dir)
	}
}

// cutCreate wants the Create's error of a restore given up: typed, with
// the container, the step and a remedy.
func cutCreate(t *testing.T, err error, id, step string) {
	t.Helper()
	if err == nil {
		t.Fatal("the given-up create succeeded")
	}
	native := errgrpc.ToNative(err)
	for _, want := range []string{id, step, ErrCreateGivenUp.Error(), "start the container again"} {
		if !strings.Contains(native.Error(), want) {
			t.Errorf("create's error lacks %q: %v", want, native)
		}
	}
}

// TestCreateDeletedDuringChecks: a Delete that comes while the checks
// run waits for the Create, which stops, removes its work directory,
// records nothing and creates no runc task; then the Delete goes on.
func TestCreateDeletedDuringChecks(t *testing.T) {
	s, f := creating()
	work := workDir(t)
	checked, release := make(chan struct{}), make(chan struct{})
	r := &taskv3.CreateTaskRequest{ID: "c1"}
	create := async(func() error {
		_, err := s.runCreate(context.Background(), "c1", checkedCreate(s, r, work, checked, release))
		return err
	})
	<-checked
	del := async(func() error {
		_, err := s.Delete(context.Background(), &taskv3.DeleteRequest{ID: "c1"})
		return err
	})
	pending(t, del, "the delete")
	close(release)
	cutCreate(t, answered(t, create, "the create"), "c1", "verify")
	answered(t, del, "the delete")
	wantGone(t, work.Dir)
	if len(s.restores) != 0 || len(s.starts) != 0 {
		t.Errorf("the given-up create left records: restores %v, runs %v", s.restores, s.starts)
	}
	if got := f.called(); got != "delete" {
		t.Errorf("runc service calls %q, want only containerd's delete", got)
	}
}

// TestCreateDeletedDuringRuncCreate: a Delete noted once the checks are
// past, during the runc service's create, undoes that create: the task
// goes, with the work directory; a checkpoint the user named stays.
func TestCreateDeletedDuringRuncCreate(t *testing.T) {
	s, f := creating()
	work := workDir(t)
	user := t.TempDir()
	r := &taskv3.CreateTaskRequest{ID: "c2", Checkpoint: user}
	var del <-chan error
	create := func(ctx context.Context) (*taskv3.CreateTaskResponse, error) {
		if _, err := s.createTask(ctx, r); err != nil {
			return nil, err
		}
		del = async(func() error {
			_, err := s.Delete(context.Background(), &taskv3.DeleteRequest{ID: "c2"})
			return err
		})
		for s.cutCause(ctx, createRunOf(ctx)) == nil {
			time.Sleep(time.Millisecond)
		}
		return nil, toGRPC(s.commitCreate(ctx, r, pendingRestore{work: work}), false)
	}
	_, err := s.runCreate(context.Background(), "c2", create)
	cutCreate(t, err, "c2", "create the runc task")
	answered(t, del, "the delete")
	wantGone(t, work.Dir)
	if _, err := os.Stat(user); err != nil {
		t.Errorf("the user's checkpoint went: %v", err)
	}
	if got := f.called(); got != "create, delete, delete" {
		t.Errorf("runc service calls %q, want the create, its undo, containerd's delete", got)
	}
	if len(s.restores) != 0 {
		t.Errorf("the given-up create recorded a restore for Start")
	}
}

// TestCreateRequestEnded: containerd's request ends during the checks
// (its deadline): the Create stops with the cause, nothing left.
func TestCreateRequestEnded(t *testing.T) {
	s, f := creating()
	work := workDir(t)
	checked, release := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	r := &taskv3.CreateTaskRequest{ID: "c3"}
	create := async(func() error {
		_, err := s.runCreate(ctx, "c3", checkedCreate(s, r, work, checked, release))
		return err
	})
	<-checked
	cancel()
	close(release)
	err := answered(t, create, "the create")
	cutCreate(t, err, "c3", "verify")
	if !strings.Contains(err.Error(), "containerd's request ended") {
		t.Errorf("the error does not say containerd's request ended: %v", err)
	}
	wantGone(t, work.Dir)
	if got := f.called(); got != "" || len(s.restores) != 0 || len(s.starts) != 0 {
		t.Errorf("runc service calls %q, restores %v, runs %v: want none", got, s.restores, s.starts)
	}
}

// TestCreateShutdownWaits: a Shutdown during the checks ends the Create
// as a Delete would, and goes to the runc service once it has ended.
func TestCreateShutdownWaits(t *testing.T) {
	s, f := creating()
	work := workDir(t)
	checked, release := make(chan struct{}), make(chan struct{})
	r := &taskv3.CreateTaskRequest{ID: "c4"}
	create := async(func() error {
		_, err := s.runCreate(context.Background(), "c4", checkedCreate(s, r, work, checked, release))
		return err
	})
	<-checked
	shut := async(func() error {
		_, err := s.Shutdown(context.Background(), &taskv3.ShutdownRequest{ID: "c4"})
		return err
	})
	pending(t, shut, "the shutdown")
	if f.called() != "" {
		t.Fatalf("the shutdown went to the runc service during the create: %s", f.called())
	}
	close(release)
	cutCreate(t, answered(t, create, "the create"), "c4", "verify")
	if err := answered(t, shut, "the shutdown"); err != nil {
		t.Fatal(err)
	}
	wantGone(t, work.Dir)
	if got := f.called(); got != "shutdown" {
		t.Errorf("runc service calls %q, want the shutdown alone", got)
	}
}

// TestCreateNotCut: a Create nobody gave up records its restore for
// Start and leaves the run; a later Delete removes the work directory.
func TestCreateNotCut(t *testing.T) {
	s, f := creating()
	work := workDir(t)
	checked, release := make(chan struct{}), make(chan struct{})
	close(release)
	r := &taskv3.CreateTaskRequest{ID: "c5"}
	resp, err := s.runCreate(context.Background(), "c5", checkedCreate(s, r, work, checked, release))
	if err != nil || resp.Pid != 42 {
		t.Fatalf("create: %v, %v", resp, err)
	}
	if _, ok := s.restores["c5"]; !ok || len(s.starts) != 0 {
		t.Fatalf("restores %v, runs %v: want the restore recorded, no run", s.restores, s.starts)
	}
	if _, err := os.Stat(work.Dir); err != nil {
		t.Fatalf("the work directory went before Start: %v", err)
	}
	if _, err := s.Delete(context.Background(), &taskv3.DeleteRequest{ID: "c5"}); err != nil {
		t.Fatal(err)
	}
	wantGone(t, work.Dir)
	if got := f.called(); got != "create, delete" {
		t.Errorf("runc service calls %q", got)
	}
}
