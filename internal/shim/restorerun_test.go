package shim

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cryo-gpu/cryo/internal/lock"
)

// fakeRunc is the runc service as the restore's requests see it: one
// task, whose init a SIGKILL ends a moment later (the reaper's delay).
type fakeRunc struct {
	taskv3.TTRPCTaskService // nil: a call no test expects panics

	mu     sync.Mutex
	status task.Status
	pid    uint32
	exit   uint32
	calls  []string
}

func (f *fakeRunc) set(st task.Status, pid uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.pid = st, pid
}

func (f *fakeRunc) called() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, ", ")
}

func (f *fakeRunc) State(_ context.Context, r *taskv3.StateRequest) (*taskv3.StateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &taskv3.StateResponse{ID: r.ID, Status: f.status, Pid: f.pid, ExitStatus: f.exit}, nil
}

func (f *fakeRunc) Kill(_ context.Context, r *taskv3.KillRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "kill "+unix.SignalName(unix.Signal(r.Signal)))
	if f.status != task.Status_RUNNING {
		return nil, errgrpc.ToGRPC(errdefs.ErrNotFound.WithMessage("process already finished"))
	}
	if r.Signal == uint32(unix.SIGKILL) {
		go func() {
			time.Sleep(30 * time.Millisecond)
			f.mu.Lock()
			f.status, f.exit = task.Status_STOPPED, 137
			f.mu.Unlock()
		}()
	}
	return &emptypb.Empty{}, nil
}

func (f *fakeRunc) Delete(_ context.Context, r *taskv3.DeleteRequest) (*taskv3.DeleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "delete")
	if f.status == task.Status_RUNNING {
		return nil, errgrpc.ToGRPC(errdefs.ErrFailedPrecondition.WithMessage("cannot delete a running process"))
	}
	return &taskv3.DeleteResponse{Pid: f.pid, ExitStatus: f.exit}, nil
}

func (f *fakeRunc) Shutdown(context.Context, *taskv3.ShutdownRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "shutdown")
	return &emptypb.Empty{}, nil
}

// restoring is a service with task id's restore taken by its Start: the
// restore's context, and the run Start ends with endStart.
func restoring(t *testing.T, id string) (*service, *fakeRunc, context.Context, *restoreRun) {
	t.Helper()
	f := &fakeRunc{status: task.Status_CREATED}
	s := &service{TTRPCTaskService: f, restores: map[string]pendingRestore{id: {}}, busy: map[string]*lock.Lock{}}
	ctx, run, _, ok := s.takeStart(context.Background(), id)
	if !ok {
		t.Fatal("no restore taken")
	}
	return s, f, ctx, run
}

// async runs fn and returns its error on a channel.
func async(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

func pending(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s answered during the restore: %v", what, err)
	case <-time.After(50 * time.Millisecond):
	}
}

func answered(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not answer once the restore ended", what)
		return nil
	}
}

// CRI's Delete of a task whose restore's Start it gave up on: the task
// reads created with no pid meanwhile (else containerd's client would not
// send the Delete), the restore's context ends, and once the restore has
// ended the restored tree is killed and reaped, Start fails, and the
// Delete answers with the tree's exit status.
func TestDeleteDuringRestoreKillsRestoredTask(t *testing.T) {
	s, f, rctx, run := restoring(t, "del-running")
	f.set(task.Status_RUNNING, 42) // runc restore done, the CUDA resume runs
	st, err := s.State(context.Background(), &taskv3.StateRequest{ID: "del-running"})
	if err != nil || st.Status != task.Status_CREATED || st.Pid != 0 {
		t.Fatalf("State during the restore: %v %v, want created with no pid", st, err)
	}
	var resp *taskv3.DeleteResponse
	del := async(func() (err error) {
		resp, err = s.Delete(context.Background(), &taskv3.DeleteRequest{ID: "del-running"})
		return err
	})
	pending(t, del, "Delete")
	if c := context.Cause(rctx); !errors.Is(c, ErrRestoreGivenUp) || !errors.Is(c, context.Canceled) {
		t.Fatalf("the restore's context after the Delete: %v, want given up (cancelled)", c)
	}
	s.atStep(run, "resume")
	_, serr := s.endStart(rctx, run, &taskv3.StartResponse{Pid: 42}, nil)
	if !errdefs.IsAborted(errgrpc.ToNative(serr)) || !strings.Contains(serr.Error(), "del-running") || !strings.Contains(serr.Error(), "killed") {
		t.Errorf("Start's answer: %v, want aborted, naming the task and its kill", serr)
	}
	if err := answered(t, del, "Delete"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if resp.ExitStatus != 137 || resp.Pid != 42 {
		t.Errorf("Delete answered exit %d pid %d, want the killed tree's 137 and 42", resp.ExitStatus, resp.Pid)
	}
	if got := f.called(); got != "kill SIGKILL, delete" {
		t.Errorf("runc service calls: %s", got)
	}
	if st, _ := s.State(context.Background(), &taskv3.StateRequest{ID: "del-running"}); st.Status != task.Status_STOPPED {
		t.Errorf("State after the restore: %v", st.Status)
	}
}

// A restore that the Delete stopped before runc's restore (or that
// failed and was removed) leaves nothing to kill: the Delete goes on.
func TestDeleteDuringRestoreThatStopped(t *testing.T) {
	s, f, rctx, run := restoring(t, "del-stopped")
	del := async(func() error {
		_, err := s.Delete(context.Background(), &taskv3.DeleteRequest{ID: "del-stopped"})
		return err
	})
	pending(t, del, "Delete")
	failed := errors.New("restore interrupted")
	if _, err := s.endStart(rctx, run, nil, failed); err != failed {
		t.Errorf("Start's answer: %v, want the restore's own error", err)
	}
	if err := answered(t, del, "Delete"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := f.called(); got != "delete" {
		t.Errorf("runc service calls: %s, want the delete alone", got)
	}
}

// A Delete that cannot wait for the restore answers before its caller's
// deadline with an error that names the container, the step and the
// remedy; the note outlives it, and the restore's end kills the task.
func TestDeleteDuringRestoreAnswersByDeadline(t *testing.T) {
	s, f, rctx, run := restoring(t, "del-deadline")
	f.set(task.Status_RUNNING, 7)
	s.atStep(run, "resume")
	ctx, cancel := context.WithTimeout(context.Background(), answerMargin+200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := s.Delete(ctx, &taskv3.DeleteRequest{ID: "del-deadline"})
	if d := time.Since(began); d > time.Second {
		t.Errorf("Delete answered after %s, past its caller's deadline less the margin", d)
	}
	if !errdefs.IsUnavailable(errgrpc.ToNative(err)) {
		t.Fatalf("Delete: %v, want unavailable", err)
	}
	for _, w := range []string{"del-deadline", "resume", "exit"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Delete's error %q does not name %q", err, w)
		}
	}
	if got := f.called(); got != "" {
		t.Errorf("runc service called during the restore: %s", got)
	}
	s.endStart(rctx, run, &taskv3.StartResponse{Pid: 7}, nil)
	if got := f.called(); got != "kill SIGKILL" {
		t.Errorf("runc service calls after the restore: %s, want the tree's kill", got)
	}
}

// A signal other than SIGKILL lets the restore complete and is delivered
// then; a SIGKILL ends the restore and kills the tree.
func TestKillDuringRestore(t *testing.T) {
	s, f, rctx, run := restoring(t, "kill-term")
	kill := async(func() error {
		_, err := s.Kill(context.Background(), &taskv3.KillRequest{ID: "kill-term", Signal: uint32(unix.SIGTERM)})
		return err
	})
	pending(t, kill, "Kill(SIGTERM)")
	if rctx.Err() != nil {
		t.Fatal("a SIGTERM ended the restore")
	}
	f.set(task.Status_RUNNING, 9)
	if resp, err := s.endStart(rctx, run, &taskv3.StartResponse{Pid: 9}, nil); err != nil || resp.Pid != 9 {
		t.Fatalf("Start after a SIGTERM: %v %v, want the restored task", resp, err)
	}
	if err := answered(t, kill, "Kill(SIGTERM)"); err != nil {
		t.Fatalf("Kill(SIGTERM): %v", err)
	}
	if got := f.called(); got != "kill SIGTERM" {
		t.Errorf("runc service calls: %s", got)
	}

	s, f, rctx, run = restoring(t, "kill-kill")
	kill = async(func() error {
		_, err := s.Kill(context.Background(), &taskv3.KillRequest{ID: "kill-kill", Signal: uint32(unix.SIGKILL), All: true})
		return err
	})
	pending(t, kill, "Kill(SIGKILL)")
	if !errors.Is(context.Cause(rctx), ErrRestoreGivenUp) {
		t.Fatalf("a SIGKILL left the restore running: %v", context.Cause(rctx))
	}
	f.set(task.Status_RUNNING, 10)
	if _, err := s.endStart(rctx, run, &taskv3.StartResponse{Pid: 10}, nil); err == nil {
		t.Error("Start succeeded for a task killed during its restore")
	}
	if err := answered(t, kill, "Kill(SIGKILL)"); err != nil {
		t.Fatalf("Kill(SIGKILL): %v", err)
	}
	if got := f.called(); got != "kill SIGKILL" {
		t.Errorf("runc service calls: %s, want one kill of the tree", got)
	}
}

// A Shutdown ends the restores in flight, then reaches the runc service.
func TestShutdownDuringRestore(t *testing.T) {
	s, f, rctx, run := restoring(t, "shut")
	shut := async(func() error {
		_, err := s.Shutdown(context.Background(), &taskv3.ShutdownRequest{ID: "shut"})
		return err
	})
	pending(t, shut, "Shutdown")
	if rctx.Err() == nil {
		t.Fatal("a Shutdown left the restore running")
	}
	f.set(task.Status_RUNNING, 11)
	s.endStart(rctx, run, &taskv3.StartResponse{Pid: 11}, nil)
	if err := answered(t, shut, "Shutdown"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := f.called(); got != "kill SIGKILL, shutdown" {
		t.Errorf("runc service calls: %s", got)
	}
}

// Without a restore in flight every request goes to the runc service as
// it came, and State says what the runc service says.
func TestNoRestoreInFlight(t *testing.T) {
	f := &fakeRunc{status: task.Status_RUNNING, pid: 5}
	s := &service{TTRPCTaskService: f, restores: map[string]pendingRestore{}, busy: map[string]*lock.Lock{}}
	ctx := context.Background()
	if st, _ := s.State(ctx, &taskv3.StateRequest{ID: "plain"}); st.Status != task.Status_RUNNING || st.Pid != 5 {
		t.Errorf("State: %v", st)
	}
	if _, err := s.Kill(ctx, &taskv3.KillRequest{ID: "plain", Signal: uint32(unix.SIGKILL)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := s.Delete(ctx, &taskv3.DeleteRequest{ID: "plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Shutdown(ctx, &taskv3.ShutdownRequest{ID: "plain"}); err != nil {
		t.Fatal(err)
	}
	if got := f.called(); got != "kill SIGKILL, delete, shutdown" {
		t.Errorf("runc service calls: %s", got)
	}
}
