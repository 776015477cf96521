package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// swrkRestore runs one restore request over CRIU's RPC (`criu swrk`) and
// returns the restored root's pid. CRIU is killed when ctx ends: its
// socket then closes and the call returns. With stdio, CRIU's stdin,
// stdout and stderr are this process's; else /dev/null, as go-criu's.
//
// go-criu's restore cannot do either: its CRIU cannot be killed, so a CRIU
// that hangs on a crafted image would hang the restore for good, and it
// always gets /dev/null as stdio. CRIU restores a shell job onto its own
// stdin: the job's terminal is a dup of CRIU's fd 0, and its session is
// CRIU's (tty.c: "Don't have tty to inherit session from" when fd 0 is no
// terminal), which is why a shell job that `criu restore --shell-job`
// restores by hand failed through go-criu. runc does the same for its
// shell jobs: it gives CRIU the process's stdio.
func swrkRestore(ctx context.Context, path string, opts *rpc.CriuOpts, stdio bool) (int, error) {
	fds, err := unix.Socketpair(unix.AF_LOCAL, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("criu swrk socket: %w", err)
	}
	cln := os.NewFile(uintptr(fds[0]), "criu-swrk-client")
	srv := os.NewFile(uintptr(fds[1]), "criu-swrk-server")
	defer cln.Close()
	cmd := exec.CommandContext(ctx, path, "swrk", "3") // ExtraFiles[0] is fd 3
	if stdio {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	cmd.ExtraFiles = []*os.File{srv}
	err = cmd.Start()
	srv.Close()
	if err != nil {
		return 0, fmt.Errorf("start criu swrk: %w", err)
	}
	resp, err := swrkCall(cln, &rpc.CriuReq{Type: rpc.CriuReqType_RESTORE.Enum(), Opts: opts})
	cln.Close() // CRIU exits once its socket closes
	if werr := cmd.Wait(); werr != nil && err == nil {
		err = fmt.Errorf("criu swrk: %w", werr)
	}
	if err != nil {
		return 0, err
	}
	return int(resp.GetRestore().GetPid()), nil
}

// swrkCall sends req and reads CRIU's answer. Without notify scripts CRIU
// answers a restore with one message.
func swrkCall(sk *os.File, req *rpc.CriuReq) (*rpc.CriuResp, error) {
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
	if !resp.GetSuccess() {
		// go-criu's wording, so that one error reads the same either way.
		return resp, fmt.Errorf("operation failed (msg:%s err:%d)", resp.GetCrErrmsg(), resp.GetCrErrno())
	}
	if resp.GetType() != req.GetType() {
		return resp, errors.New("unexpected CRIU RPC response " + resp.GetType().String())
	}
	return resp, nil
}
