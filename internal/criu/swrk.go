package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// swrk is one call over CRIU's RPC (`criu swrk`), with CRIU in a session
// of its own. go-criu's client cannot do what cryo needs here:
//
//   - Signals. go-criu starts CRIU in its caller's process group, so a
//     terminal's Ctrl-C (a signal to the whole group: `kill -INT -PGID`,
//     `timeout -s INT`, systemd, CI runners) reached CRIU as well, which
//     died with its parasite inside the dumped tree: the workload died
//     while cryo rolled back a dump that had "failed". CRIU in its own
//     session gets no signal meant for cryo; cryo decides what it means.
//   - Killing. A restore's CRIU is killed when ctx ends (a CRIU that hangs
//     on a crafted image would hang the restore for good) and when cryo
//     dies (Pdeathsig). A dump's CRIU is neither: killed mid-dump it would
//     lose the workload, while a dump that runs to its end leaves the tree
//     as the options say (running, or stopped for `cryo recover`).
//   - Stdio. CRIU restores a shell job onto its own stdin: the job's
//     terminal is a dup of CRIU's fd 0, and its session is CRIU's (tty.c:
//     "Don't have tty to inherit session from" when fd 0 is no terminal).
//     With stdio, CRIU gets this process's stdio and stays in our process
//     group, the terminal's foreground one: a shell job whose root leads
//     no group joins CRIU's group (pstree.c, prepare_pstree_for_shell_job)
//     and CRIU hands the terminal to its parent's (tty.c), so CRIU in a
//     group of its own would leave the job in the background, stopped by
//     its first read. A Ctrl-C there ends a restore, not a workload: the
//     checkpoint is unchanged. Else /dev/null, as go-criu's. runc does the
//     same for its shell jobs.
type swrk struct {
	path  string
	stdio bool // CRIU's stdio is ours, and it keeps our session
	// killable: CRIU dies when ctx ends or when this process dies. Only a
	// restore is: see above.
	killable bool
}

// call sends req to a fresh CRIU and returns its answer. Notifications
// (action-script phases, with NotifyScripts) are acknowledged.
func (s swrk) call(ctx context.Context, req *rpc.CriuReq) (*rpc.CriuResp, error) {
	fds, err := unix.Socketpair(unix.AF_LOCAL, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("criu swrk socket: %w", err)
	}
	cln := os.NewFile(uintptr(fds[0]), "criu-swrk-client")
	srv := os.NewFile(uintptr(fds[1]), "criu-swrk-server")
	defer cln.Close()
	if s.killable {
		// Pdeathsig fires when the forking thread exits: keep this
		// goroutine on one thread until CRIU is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	cmd := s.command(srv)
	err = cmd.Start()
	srv.Close()
	if err != nil {
		return nil, fmt.Errorf("start criu swrk: %w", err)
	}
	stop := s.watch(ctx, cmd)
	resp, err := swrkCall(cln, req)
	cln.Close() // CRIU exits once its socket closes
	werr := cmd.Wait()
	stop()
	if werr != nil && err == nil {
		err = fmt.Errorf("criu swrk: %w", werr)
	}
	return resp, err
}

// command is CRIU's swrk in its own session (in ours, with stdio), with
// srv as fd 3.
func (s swrk) command(srv *os.File) *exec.Cmd {
	cmd := exec.Command(s.path, "swrk", "3") // ExtraFiles[0] is fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: !s.stdio}
	if s.stdio {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	if s.killable {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	cmd.ExtraFiles = []*os.File{srv}
	return cmd
}

// watch kills a killable CRIU's whole group when ctx ends: its helpers
// too (a restore's `criu swrk` children), which a kill of CRIU's pid alone
// left stopped, re-parented to init. CRIU in our group (stdio) is killed
// alone. It returns the watch's stop.
func (s swrk) watch(ctx context.Context, cmd *exec.Cmd) func() {
	if !s.killable {
		return func() {}
	}
	target := -cmd.Process.Pid
	if s.stdio {
		target = cmd.Process.Pid
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(target, syscall.SIGKILL)
		case <-done:
		}
	}()
	return func() { close(done) }
}

// swrkRestore runs one restore request and returns the restored root's
// pid; CRIU is killed when ctx ends.
func swrkRestore(ctx context.Context, path string, opts *rpc.CriuOpts, stdio bool) (int, error) {
	s := swrk{path: path, stdio: stdio, killable: true}
	resp, err := s.call(ctx, &rpc.CriuReq{Type: rpc.CriuReqType_RESTORE.Enum(), Opts: opts})
	if err != nil {
		return 0, err
	}
	return int(resp.GetRestore().GetPid()), nil
}

// swrkDump runs one dump request to its end, whatever ctx does.
func swrkDump(ctx context.Context, path string, opts *rpc.CriuOpts) error {
	_, err := swrk{path: path}.call(ctx, &rpc.CriuReq{Type: rpc.CriuReqType_DUMP.Enum(), Opts: opts})
	return err
}

// swrkCall sends req and reads CRIU's answer, acknowledging the
// notifications that come before it.
func swrkCall(sk *os.File, req *rpc.CriuReq) (*rpc.CriuResp, error) {
	for msg := req; ; {
		resp, err := swrkSend(sk, msg)
		if err != nil {
			return resp, err
		}
		if resp.GetType() != rpc.CriuReqType_NOTIFY {
			return checkAnswer(req, resp)
		}
		msg = &rpc.CriuReq{Type: rpc.CriuReqType_NOTIFY.Enum(), NotifySuccess: proto.Bool(true)}
	}
}

// swrkSend writes one message and reads one.
func swrkSend(sk *os.File, req *rpc.CriuReq) (*rpc.CriuResp, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := sk.Write(b); err != nil {
		return nil, fmt.Errorf("criu swrk: %w", err)
	}
	buf := make([]byte, 2*4096) // go-criu's size: an answer is small
	n, err := sk.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("criu swrk: %w", err)
	}
	resp := &rpc.CriuResp{}
	if err := proto.Unmarshal(buf[:n], resp); err != nil {
		return nil, fmt.Errorf("criu swrk answer: %w", err)
	}
	return resp, nil
}

// checkAnswer words a failed answer as go-criu does, so that one error
// reads the same either way.
func checkAnswer(req *rpc.CriuReq, resp *rpc.CriuResp) (*rpc.CriuResp, error) {
	if !resp.GetSuccess() {
		return resp, fmt.Errorf("operation failed (msg:%s err:%d)", resp.GetCrErrmsg(), resp.GetCrErrno())
	}
	if resp.GetType() != req.GetType() {
		return resp, errors.New("unexpected CRIU RPC response " + resp.GetType().String())
	}
	return resp, nil
}
