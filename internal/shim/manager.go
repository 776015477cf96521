// Why a copy of containerd's Start. The shim's `start` (create or find the
// socket, re-execute the serving shim with it as fd 3, group tasks under
// one shim) is containerd's runc shim manager's Start, rewritten here
// rather than called, because that Start, in containerd v2.2 as in go.mod,
// cannot serve cryo:
//
//   - it re-executes os.Executable() with argv[0] set to that path, which
//     for the multi-call binary is bin/cryo: the server would start as the
//     cryo CLI. cryo's keeps argv[0] = containerd-shim-cryo-v2;
//   - it reports bootstrap version 3, which containerd 1.7 refuses; startMain
//     prints the plain address that 1.7 and 2.x both read as version 2;
//   - its group labels are fixed; cryo adds io.containerd.cryo.v2.group.
//
// Stop and Info are containerd's, delegated. manager_drift_test.go runs
// both Starts side by side and fails when containerd's changes what
// containerd sees (socket address, grouping, the server's arguments,
// environment, directory, process group and fd 3), apart from the
// differences above and GOMAXPROCS=4, which containerd's adds and cryo's
// does not.

package shim

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"syscall"

	"github.com/containerd/containerd/api/types"
	runcmanager "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/manager"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"

	"github.com/cryo-gpu/cryo/internal/bundle"
)

// groupLabels group several containers under one shim, as the runc shim
// does: cryo's own label first, then runc's and Kubernetes' pod label.
var groupLabels = []string{
	"io.containerd.cryo.v2.group",
	"io.containerd.runc.v2.group",
	"io.kubernetes.cri.sandbox-id",
}

// manager starts the serving shim itself and delegates Stop (the `delete`
// action: runc delete, unmount) and Info to containerd's runc manager.
//
// Start is not delegated: the runc manager re-executes os.Executable(),
// which for the multi-call binary is bin/cryo, and argv[0] decides what
// that binary does. Here the child keeps argv[0] = containerd-shim-cryo-v2.
type manager struct {
	runc shim.Manager
}

func newManager() *manager {
	return &manager{runc: runcmanager.NewShimManager(RuntimeName)}
}

func (m *manager) Name() string { return RuntimeName }

// Stop is `delete`, which containerd also runs when a shim has died. The
// runc manager's `runc delete --force` kills the container's processes
// whatever their CUDA state (locked or checkpointed by a checkpoint that the
// dead shim left half-way) and however frozen, so the task ends up stopped
// and its container can start again; cryo's driver helper died with the
// shim (Pdeathsig, cuda.Options.DieWithCaller), so no CUDA call races the
// kill, and no helper tracing the task's threads keeps their exits from
// being reaped. Then it says what became of a checkpoint the dead shim had
// in flight (deadcheckpoint.go).
func (m *manager) Stop(ctx context.Context, id string) (shim.StopStatus, error) {
	ss, err := m.runc.Stop(ctx, id)
	if cwd, werr := os.Getwd(); werr == nil {
		// The runc manager's bundle: containerd runs `delete` in it.
		settleDeadCheckpoint(ctx, id, filepath.Join(filepath.Dir(cwd), id))
	}
	return ss, err
}

func (m *manager) Info(ctx context.Context, options io.Reader) (*types.RuntimeInfo, error) {
	return m.runc.Info(ctx, options)
}

// Start creates the shim's socket, or returns the address of a shim already
// serving the same group, and starts the server with the socket as fd 3.
func (m *manager) Start(ctx context.Context, id string, opts shim.StartOpts) (shim.BootstrapParams, error) {
	params := shim.BootstrapParams{Version: 2, Protocol: "ttrpc"}
	address, err := shim.SocketAddress(ctx, opts.Address, groupOf(id), false)
	if err != nil {
		return params, err
	}
	params.Address = address
	sock, err := shim.NewSocket(address)
	if err != nil {
		if !shim.SocketEaddrinuse(err) {
			return params, fmt.Errorf("create shim socket %s: %w", address, err)
		}
		if shim.CanConnect(address) {
			return params, nil // grouped: that shim serves this task too
		}
		if err := shim.RemoveSocket(address); err != nil {
			return params, fmt.Errorf("remove stale shim socket %s: %w", address, err)
		}
		if sock, err = shim.NewSocket(address); err != nil {
			return params, fmt.Errorf("create shim socket %s: %w", address, err)
		}
	}
	if err := spawnServer(ctx, id, opts, sock); err != nil {
		_ = shim.RemoveSocket(address)
		return params, err
	}
	return params, nil
}

// groupOf is the id the socket is named after: a group label of the
// bundle's spec, else the task id.
func groupOf(id string) string {
	annotations := bundle.Annotations(".") // the shim starts in the bundle
	for _, label := range groupLabels {
		if g, ok := annotations[label]; ok && g != "" {
			return g
		}
	}
	return id
}

// serverCommand is the long-lived shim: the same executable, named
// containerd-shim-cryo-v2, in the bundle directory.
func serverCommand(ctx context.Context, id string, opts shim.StartOpts) (*exec.Cmd, error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	args := []string{BinaryName, "-namespace", ns, "-id", id, "-address", opts.Address}
	if opts.Debug {
		args = append(args, "-debug")
	}
	cmd := &exec.Cmd{Path: self, Args: args, Dir: cwd}
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=containerd-shim-"+id)
	// Its own process group: containerd's signals to `start` must not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

func spawnServer(ctx context.Context, id string, opts shim.StartOpts, sock interface{ File() (*os.File, error) }) error {
	cmd, err := serverCommand(ctx, id, opts)
	if err != nil {
		return err
	}
	f, err := sock.File()
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.ExtraFiles = []*os.File{f}
	// The server inherits this thread's attributes (sched-core cookie).
	goruntime.LockOSThread()
	err = cmd.Start()
	goruntime.UnlockOSThread()
	if err != nil {
		return fmt.Errorf("start shim server: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	if err := joinShimCgroup(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	if err := shim.AdjustOOMScore(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("adjust OOM score of shim: %w", err)
	}
	return nil
}
