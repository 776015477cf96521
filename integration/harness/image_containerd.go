package harness

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// CtrdNode is a containerd daemon with its own cryo image store.
type CtrdNode struct {
	*Daemon
	*ImgNode
}

func NewCtrdNode(t *testing.T, v CtrdVersion) *CtrdNode {
	d := StartDaemon(t, v)
	return &CtrdNode{Daemon: d, ImgNode: NewNode(t, nil)}
}

func (n *CtrdNode) at() []string {
	return []string{"--address", n.Socket, "--namespace", TestNamespace}
}

func (n *CtrdNode) Cryo(t *testing.T, args ...string) string {
	t.Helper()
	return n.ImgNode.Cryo(t, n.WithAt(args)...)
}

func (n *CtrdNode) CryoFails(t *testing.T, args ...string) string {
	t.Helper()
	return n.ImgNode.CryoFails(t, n.WithAt(args)...)
}

// withAt puts --address and --namespace after the subcommand words of
// "image build", "image restore" and "restore".
func (n *CtrdNode) WithAt(args []string) []string {
	i := 1
	if args[0] == "image" {
		i = 2
	}
	out := append(append([]string{}, args[:i]...), n.at()...)
	return append(out, args[i:]...)
}

func UniqueID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9)
}
