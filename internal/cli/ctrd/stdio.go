package ctrd

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/pkg/cio"
	"golang.org/x/sys/unix"
)

// restoredIO is the stdio of a restored task: pipes, as containerd gives
// a task that `ctr run` starts, never a host file.
//
// The shim hands runc restore its own stdio for the pipes the checkpoint
// recorded (CRIU's inherit-fd), and containerd's null IO makes those the
// shim's host /dev/null. runc run reopens a /dev/null stdio inside the
// container; runc restore does not. The restored task then held the
// host's /dev/null, whose mount is not in its mount namespace, and the
// next checkpoint of it failed ("Can't lookup mount=N for fd=1
// path=/dev/null").
//
// So stdout and stderr go through the shim's pipes into logPath, or into
// /dev/null opened by the shim, and stdin is a pipe too: the shim reads a
// FIFO that nobody writes, and the task reads EOF, as from /dev/null.
func restoredIO(logPath string) cio.Creator {
	return func(id string) (cio.IO, error) {
		uri, err := cio.LogURIGenerator("file", cmp.Or(logPath, os.DevNull), nil)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "cryo-stdin-")
		if err != nil {
			return nil, err
		}
		stdin := filepath.Join(dir, "stdin")
		if err := unix.Mkfifo(stdin, 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("stdin FIFO of %s: %w", id, err)
		}
		return &pipeIO{dir: dir, config: cio.Config{Stdin: stdin, Stdout: uri.String(), Stderr: uri.String()}}, nil
	}
}

// pipeIO copies nothing itself: the shim opens the FIFO and the file.
type pipeIO struct {
	dir    string
	config cio.Config
}

func (p *pipeIO) Config() cio.Config { return p.config }
func (p *pipeIO) Cancel()            {}
func (p *pipeIO) Wait()              {}

// Close removes the FIFO; the shim holds it open already.
func (p *pipeIO) Close() error { return os.RemoveAll(p.dir) }
