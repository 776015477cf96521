package shim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/cryo-gpu/cryo/internal/bundle"
	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// hooksOf reads the hooks a container's spec names (cryo.io/pre-checkpoint,
// cryo.io/post-restore, as pod annotations through pod_annotations): each
// runs its exec hooks through the runc service's exec, as `ctr task exec`
// and `kubectl exec` do, with the container's own user, capabilities,
// seccomp, cgroup and namespaces.
func (s *service) hooksOf(id, bundleDir, op string) (pre, post *orchestrate.Hook, err error) {
	h, err := hook.FromAnnotations(bundle.Annotations(bundleDir))
	if err != nil {
		return nil, nil, &report.StepError{Op: op, ID: id, Step: "read the hooks", Err: err,
			Outcome: "nothing was done: the container runs on as it was",
			Remedy:  "fix the container's (or pod's) hook annotation: " + hook.Syntax}
	}
	return s.asHook(id, bundleDir, h.Pre), s.asHook(id, bundleDir, h.Post), nil
}

func (s *service) asHook(id, bundleDir string, spec *hook.Spec) *orchestrate.Hook {
	if spec == nil {
		return nil
	}
	return &orchestrate.Hook{Spec: *spec, Exec: s.execIn(id, bundleDir)}
}

var hookExecs atomic.Int64

// execIn runs a command in task id through the runc service: the process
// spec is the container's own with its arguments replaced, so the hook
// has exactly the rights of the container's process, never more. Its
// output comes back through a fifo, as a container's stdio does.
func (s *service) execIn(id, bundleDir string) hook.Exec {
	return func(ctx context.Context, _ int, argv []string) (int, []byte, error) {
		spec, err := bundle.Read(bundleDir)
		if err != nil || spec.Process == nil {
			return 0, nil, fmt.Errorf("the container's process spec: %w", err)
		}
		p := *spec.Process
		p.Args, p.Terminal, p.ConsoleSize = argv, false, nil
		value, err := json.Marshal(&p)
		if err != nil {
			return 0, nil, err
		}
		out, err := newHookOutput()
		if err != nil {
			return 0, nil, err
		}
		defer out.close()
		execID := fmt.Sprintf("cryo-hook-%d-%d", os.Getpid(), hookExecs.Add(1))
		req := &taskv3.ExecProcessRequest{ID: id, ExecID: execID, Stdout: out.path, Stderr: out.path,
			Spec: &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process", Value: value}}
		status, err := s.runExec(ctx, req)
		return status, out.collect(), err
	}
}

// runExec creates, starts and waits for one exec process, killing it at
// ctx's deadline, and always deletes it.
func (s *service) runExec(ctx context.Context, req *taskv3.ExecProcessRequest) (int, error) {
	bg := context.WithoutCancel(ctx)
	if _, err := s.TTRPCTaskService.Exec(bg, req); err != nil {
		return 0, fmt.Errorf("exec in the container: %w", err)
	}
	defer s.TTRPCTaskService.Delete(bg, &taskv3.DeleteRequest{ID: req.ID, ExecID: req.ExecID})
	if _, err := s.TTRPCTaskService.Start(bg, &taskv3.StartRequest{ID: req.ID, ExecID: req.ExecID}); err != nil {
		return 0, fmt.Errorf("start the exec in the container: %w", err)
	}
	type waited struct {
		status uint32
		err    error
	}
	ch := make(chan waited, 1)
	go func() {
		r, err := s.TTRPCTaskService.Wait(bg, &taskv3.WaitRequest{ID: req.ID, ExecID: req.ExecID})
		if err != nil {
			ch <- waited{err: err}
			return
		}
		ch <- waited{status: r.ExitStatus}
	}()
	select {
	case w := <-ch:
		return int(w.status), w.err
	case <-ctx.Done():
		_, _ = s.TTRPCTaskService.Kill(bg, &taskv3.KillRequest{ID: req.ID, ExecID: req.ExecID, Signal: uint32(unix.SIGKILL)})
		select {
		case <-ch:
		case <-time.After(10 * time.Second): // the delete still runs
		}
		return 0, ctx.Err()
	}
}

// hookOutput is the fifo an exec hook writes its output into.
type hookOutput struct {
	dir, path string
	f         *os.File
	buf       []byte
	done      chan struct{}
}

// newHookOutput makes the fifo in a private directory and reads it: opened
// read-write, it never reads end-of-file before the runc service opens it.
func newHookOutput() (*hookOutput, error) {
	dir, err := os.MkdirTemp("", "cryo-hook-")
	if err != nil {
		return nil, err
	}
	o := &hookOutput{dir: dir, path: filepath.Join(dir, "out"), done: make(chan struct{})}
	if err := unix.Mkfifo(o.path, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if o.f, err = os.OpenFile(o.path, os.O_RDWR, 0); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go o.read()
	return o, nil
}

func (o *hookOutput) read() {
	defer close(o.done)
	b := make([]byte, 4096)
	for {
		n, err := o.f.Read(b)
		if len(o.buf) < 64<<10 {
			o.buf = append(o.buf, b[:n]...)
		}
		if err != nil {
			return
		}
	}
}

// collect is what was written, once the runc service has copied the rest.
func (o *hookOutput) collect() []byte {
	_ = o.f.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	<-o.done
	return o.buf
}

func (o *hookOutput) close() {
	o.f.Close()
	os.RemoveAll(o.dir)
}
