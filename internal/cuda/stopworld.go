package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// No thread of a CUDA process may run while its GPU state is away: between
// the driver's checkpoint of the process and the end of its restore. The
// driver maps memory into the process that its own threads (libcuda's, and
// a framework's) read outside any API call; with the GPU state away those
// reads fault and the process dies (a JAX process has ~175 threads, and
// two of them did). Only the driver's restore thread
// (cuCheckpointProcessGetRestoreThreadId) may run, and only during the
// driver's checkpoint and restore actions, with every signal blocked, as
// CRIU's own CUDA plugin does.
//
// The hold is a group stop (SIGSTOP) taken under ptrace: every thread is
// seized and stopped, the restore thread alone is let run for the driver's
// action, then stopped again, and the tracer detaches. A group stop
// survives the detach, the tracer's death and a CRIU dump (CRIU records the
// task as stopped and restores it stopped), so the process stays stopped
// from its checkpoint until cryo resumes it: after the driver's restore
// and unlock, a SIGCONT lets every thread go. If cryo dies in between, the
// process is left stopped, never running on a checkpointed GPU, and
// `cryo cuda resume` brings it back.

// worldTimeout bounds one ptrace transition (seize, stop, interrupt).
const worldTimeout = 10 * time.Second

// ErrStopWorld marks a failure to stop or release a process's threads.
var ErrStopWorld = errors.New("cannot hold the process's threads")

// world is one process with every thread seized by a tracer thread.
type world struct {
	pid  int
	tids map[int]bool // seized threads
	tr   *tracer
	mask map[int]uint64 // the signal masks run saved
	pump chan struct{}  // closed to end the keep-running loop of run
	// released: run ended the group stop for the driver's action; hold
	// starts it again.
	released bool
}

// tracer runs ptrace requests on one locked OS thread: the kernel binds a
// tracee to the thread that seized it. The thread is never unlocked, so it
// exits with its goroutine and the kernel detaches whatever it still held.
type tracer struct{ reqs chan func() }

func newTracer() *tracer {
	t := &tracer{reqs: make(chan func())}
	go func() {
		runtime.LockOSThread()
		for f := range t.reqs {
			f()
		}
	}()
	return t
}

func (t *tracer) do(f func() error) error {
	done := make(chan error, 1)
	t.reqs <- func() { done <- f() }
	return <-done
}

// start hands f to the tracer thread and returns once the thread has taken
// it, without waiting for it to end.
func (t *tracer) start(f func()) { t.reqs <- f }

func (t *tracer) close() { close(t.reqs) }

// stopWorld seizes every thread of pid and leaves them all in a group
// stop. A process that is already stopped (a restored one, or one whose
// checkpoint left it stopped) is seized as it is.
func stopWorld(ctx context.Context, pid int) (*world, error) {
	return seizeWorld(ctx, pid, true)
}

// interruptWorld seizes every thread of pid and stops each in a trace stop
// only: no group stop is started, so the process is left as it was found
// (running, or stopped) when the tracer detaches. For a query, which must
// not stop a process that a resume beside it has just continued.
func interruptWorld(ctx context.Context, pid int) (*world, error) {
	return seizeWorld(ctx, pid, false)
}

func seizeWorld(ctx context.Context, pid int, group bool) (*world, error) {
	w := &world{pid: pid, tids: map[int]bool{}, tr: newTracer(), mask: map[int]uint64{}}
	err := w.tr.do(func() error {
		if err := w.seizeAll(); err != nil {
			return err
		}
		if group {
			return w.groupStop(ctx)
		}
		return w.interruptAll(ctx)
	})
	if err != nil {
		w.detach()
		return nil, fmt.Errorf("pid %d: %w: %w", pid, ErrStopWorld, err)
	}
	return w, nil
}

// seizeAll seizes the threads /proc lists until no new one appears: a
// seized thread's clones are seized by the kernel (TRACECLONE).
func (w *world) seizeAll() error {
	for round := 0; round < 100; round++ {
		tids, err := threads(w.pid)
		if err != nil {
			return err
		}
		added := 0
		for _, tid := range tids {
			if w.tids[tid] {
				continue
			}
			err := seize(tid)
			if errors.Is(err, unix.ESRCH) {
				continue // exited meanwhile
			}
			if err != nil {
				return seizeError(tid, err)
			}
			unix.PtraceSetOptions(tid, unix.PTRACE_O_TRACECLONE)
			w.tids[tid], added = true, added+1
		}
		if added == 0 {
			return nil
		}
	}
	return fmt.Errorf("the process keeps creating threads")
}

// groupStop stops every seized thread in a group stop: SIGSTOP, let
// through where a thread reports it, until every thread reports the stop.
func (w *world) groupStop(ctx context.Context) error {
	if !stopped(w.pid) {
		if err := unix.Kill(w.pid, unix.SIGSTOP); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
	}
	pending := map[int]bool{}
	for tid := range w.tids {
		pending[tid] = true
	}
	return w.waitStops(ctx, pending, true)
}

// interruptAll stops every seized thread in a trace stop (PTRACE_INTERRUPT).
func (w *world) interruptAll(ctx context.Context) error {
	pending := map[int]bool{}
	for tid := range w.tids {
		if err := unix.PtraceInterrupt(tid); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("interrupt thread %d: %w", tid, err)
		}
		pending[tid] = true
	}
	return w.waitStops(ctx, pending, false)
}

// waitStops waits until every pending thread is in a ptrace stop of the
// kind wanted (a group stop, or any event stop), passing other signals on.
func (w *world) waitStops(ctx context.Context, pending map[int]bool, group bool) error {
	deadline := time.Now().Add(worldTimeout)
	for len(pending) > 0 {
		progress := false
		for tid := range pending {
			done, err := w.poll(tid, group)
			if err != nil {
				return err
			}
			if done {
				delete(pending, tid)
				progress = true
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d thread(s) did not stop within %s", len(pending), worldTimeout)
		}
		if !progress {
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// poll reaps one event of tid, if any, and reports whether tid is now in
// the wanted stop. A thread that exited is done (and forgotten); a new
// clone is added, stopped; a signal is passed on to the thread.
func (w *world) poll(tid int, group bool) (bool, error) {
	var ws unix.WaitStatus
	got, err := unix.Wait4(tid, &ws, unix.WNOHANG|unix.WALL, nil)
	if errors.Is(err, unix.ECHILD) {
		delete(w.tids, tid)
		return true, nil
	}
	if err != nil || got == 0 {
		return false, err
	}
	// A ptrace event is in bits 16-23 of the status, whatever the stop
	// signal (a group stop under PTRACE_SEIZE reports PTRACE_EVENT_STOP
	// with the stopping signal, which WaitStatus.TrapCause ignores).
	event := int(uint32(ws)>>16) & 0xff
	switch {
	case ws.Exited() || ws.Signaled():
		delete(w.tids, tid)
		return true, nil
	case !ws.Stopped():
		return false, nil
	case event == unix.PTRACE_EVENT_STOP:
		if group && !isStopSignal(ws.StopSignal()) {
			return false, unix.PtraceCont(tid, 0) // an interrupt; wait for the group stop
		}
		return true, nil
	case event == unix.PTRACE_EVENT_CLONE:
		if msg, err := unix.PtraceGetEventMsg(tid); err == nil {
			w.tids[int(msg)] = true // seized by the kernel; it stops with the group
		}
		return false, unix.PtraceCont(tid, 0)
	default:
		sig := ws.StopSignal()
		if sig == unix.SIGTRAP {
			sig = 0
		}
		return false, unix.PtraceCont(tid, int(sig)) // a signal: deliver it (SIGSTOP starts the group stop)
	}
}

// seize seizes thread tid, waiting a little while another tracer holds
// it: another cryo's short state query, which ends in milliseconds.
func seize(tid int) error {
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		err := unix.PtraceSeize(tid)
		if !errors.Is(err, unix.EPERM) || time.Now().After(deadline) {
			return err
		}
	}
}

// seizeError says who holds a thread that cannot be seized: another
// tracer (a cryo whose driver call is under way, a debugger, CRIU).
func seizeError(tid int, err error) error {
	if !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("seize thread %d: %w", tid, err)
	}
	tracer := procfs.ThreadTracer(tid)
	if tracer == 0 {
		return fmt.Errorf("seize thread %d: %w (are ptrace's rights missing? cryo needs root with CAP_SYS_PTRACE)", tid, err)
	}
	return fmt.Errorf("seize thread %d: %w: pid %d (%s) traces it; a cryo checkpoint, resume or state query may be under way: retry once it has finished", tid, err, tracer, procfs.Comm(tracer))
}

func isStopSignal(s unix.Signal) bool {
	return s == unix.SIGSTOP || s == unix.SIGTSTP || s == unix.SIGTTIN || s == unix.SIGTTOU
}

// run lets thread tid run, every signal blocked, as the driver's restore
// thread runs CRIU's CUDA plugin.
//
// The group stop is lifted for the action while every other thread stays
// in its trace stop: a thread created while a process is group-stopped
// joins the stop at once, and the driver starts threads during its
// actions (a JAX process on two GPUs held in a group stop through its
// checkpoint and restore got CUDA_ERROR_INVALID_VALUE from the restore,
// where one held only by ptrace, as CRIU's plugin holds it, was
// restored). hold stops the group again. The cost: a tracer killed during
// an action (its deadline passed) leaves the process running. lift: end
// the group stop for the action (not for a query).
func (w *world) run(tid int, lift bool) error {
	err := w.tr.do(func() error {
		if !w.tids[tid] {
			return fmt.Errorf("pid %d: %w: the driver's restore thread %d is not a thread of the process", w.pid, ErrStopWorld, tid)
		}
		if lift {
			if err := unix.Kill(w.pid, unix.SIGCONT); err != nil {
				return fmt.Errorf("pid %d: %w: end the group stop: %w", w.pid, ErrStopWorld, err)
			}
			w.released = true
		}
		var old uint64
		if err := ptraceSigmask(unix.PTRACE_GETSIGMASK, tid, &old); err != nil {
			return fmt.Errorf("pid %d: %w: read the signal mask of thread %d: %w", w.pid, ErrStopWorld, tid, err)
		}
		all := ^uint64(0)
		if err := ptraceSigmask(unix.PTRACE_SETSIGMASK, tid, &all); err != nil {
			return fmt.Errorf("pid %d: %w: block the signals of thread %d: %w", w.pid, ErrStopWorld, tid, err)
		}
		w.mask[tid] = old
		// No ptrace options while it runs, as CRIU's CUDA plugin clears
		// them: a thread the driver starts during its action (a restore
		// starts some, one per GPU context) is then not traced, and runs
		// for the driver instead of waiting, stopped, in a trace stop
		// that nobody lifts (the restore then fails).
		if err := unix.PtraceSetOptions(tid, 0); err != nil {
			return fmt.Errorf("pid %d: %w: clear the ptrace options of thread %d: %w", w.pid, ErrStopWorld, tid, err)
		}
		if err := unix.PtraceCont(tid, 0); err != nil {
			return fmt.Errorf("pid %d: %w: run thread %d: %w", w.pid, ErrStopWorld, tid, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The pump is handed to the tracer thread before run returns, so that
	// every later request (hold's, detach's) queues behind it: handed over
	// from a goroutine, it could come after detach had closed the queue.
	pump := make(chan struct{}) // its own: hold clears w.pump
	w.pump = pump
	w.tr.start(func() { w.keepRunning(tid, pump) })
	return nil
}

// keepRunning keeps thread tid running until done is closed. While the
// process is group-stopped, a thread let out of the stop reports it again
// (a stop signal's delivery, or the group stop's trap) as it returns to
// user space; the process is stopped already, so the stop is swallowed
// and the thread continued. Its other signals are blocked.
func (w *world) keepRunning(tid int, done chan struct{}) {
	for {
		select {
		case <-done:
			return
		default:
		}
		var ws unix.WaitStatus
		got, err := unix.Wait4(tid, &ws, unix.WNOHANG|unix.WALL, nil)
		if err != nil {
			return
		}
		if got == 0 || !ws.Stopped() {
			if got != 0 {
				delete(w.tids, tid) // it exited
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		sig := 0
		if !isStopSignal(ws.StopSignal()) && ws.StopSignal() != unix.SIGTRAP {
			sig = int(ws.StopSignal())
		}
		unix.PtraceCont(tid, sig)
	}
}

// hold stops thread tid again and gives it back its signal mask.
func (w *world) hold(ctx context.Context, tid int) error {
	if w.pump != nil {
		close(w.pump)
		w.pump = nil
	}
	return w.tr.do(func() error {
		if !w.tids[tid] {
			return nil // it exited
		}
		if err := unix.PtraceInterrupt(tid); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pid %d: %w: stop thread %d: %w", w.pid, ErrStopWorld, tid, err)
		}
		if err := w.waitStops(ctx, map[int]bool{tid: true}, false); err != nil {
			return fmt.Errorf("pid %d: %w: thread %d: %w", w.pid, ErrStopWorld, tid, err)
		}
		if old, ok := w.mask[tid]; ok && w.tids[tid] {
			ptraceSigmask(unix.PTRACE_SETSIGMASK, tid, &old)
			delete(w.mask, tid)
		}
		if w.released {
			// Pending while every thread is in its trace stop: each one
			// takes the stop as it is detached, before any user code,
			// and so does any thread the driver started.
			if err := unix.Kill(w.pid, unix.SIGSTOP); err != nil {
				return fmt.Errorf("pid %d: %w: stop the group again: %w", w.pid, ErrStopWorld, err)
			}
			w.released = false
		}
		return nil
	})
}

// detach lets go of every thread. The group stop outlives it: the
// threads stay stopped (a thread ptrace had let run re-enters the stop),
// until SIGCONT.
func (w *world) detach() {
	w.tr.do(func() error {
		for tid := range w.tids {
			unix.PtraceDetach(tid)
		}
		return nil
	})
	w.tr.close()
	w.settle()
}

// settle waits (briefly) until every thread shows the group stop: a
// thread detached from a ptrace stop moves on into the group stop by
// itself, in the kernel, without running user code; until it has, the
// process does not look stopped to `cryo cuda state` or release.
func (w *world) settle() {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if allThreadsIn(w.pid, 'T') {
			return
		}
	}
}

// allThreadsIn reports whether every thread of pid is in state c.
func allThreadsIn(pid int, c byte) bool {
	tids, err := threads(pid)
	if err != nil {
		return false
	}
	for _, tid := range tids {
		if s := threadState(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid)); s != c && s != 0 {
			return false
		}
	}
	return true
}

// anyThreadIn reports whether a thread of pid is in state c.
func anyThreadIn(pid int, c byte) bool {
	tids, _ := threads(pid)
	for _, tid := range tids {
		if threadState(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid)) == c {
			return true
		}
	}
	return false
}

// threadState is the state letter of a /proc stat file, 0 if unreadable.
func threadState(path string) byte {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || len(s) <= i+2 {
		return 0
	}
	return s[i+2]
}

// threads lists the threads of pid.
func threads(pid int) ([]int, error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// stopped reports whether pid is in a group stop (state T in /proc).
func stopped(pid int) bool {
	return threadState(fmt.Sprintf("/proc/%d/stat", pid)) == 'T' || anyThreadIn(pid, 'T')
}

// Stopped reports whether pid is held in a group stop, as cryo leaves a
// process whose GPU state is checkpointed.
func Stopped(pid int) bool { return stopped(pid) }

// ptraceSigmask gets or sets a stopped tracee's blocked signals.
func ptraceSigmask(req int, tid int, mask *uint64) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), 8, uintptrOf(mask), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func uintptrOf(p *uint64) uintptr { return uintptr(unsafe.Pointer(p)) }
