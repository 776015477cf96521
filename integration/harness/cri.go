package harness

import (
	"testing"
)

// with returns the node bound to a subtest's testing.T.
func (n *CRINode) With(t testing.TB) *CRINode {
	c := *n
	c.Daemon = n.Daemon.With(t)
	return &c
}
