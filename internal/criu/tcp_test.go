package criu

import (
	"os"
	"path/filepath"
	"testing"
)

func TestEstablishedTCP(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"tcp-stream-1a2b.img", "tcp-stream-3c.img", "inetsk.img", "tcp-stream-x.log"} {
		os.WriteFile(filepath.Join(dir, f), nil, 0o600)
	}
	if n, err := EstablishedTCP(dir); n != 2 || err != nil {
		t.Fatalf("EstablishedTCP: %d, %v; want 2", n, err)
	}
	if _, err := EstablishedTCP(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing directory counted")
	}
}
