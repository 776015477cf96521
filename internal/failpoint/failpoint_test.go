package failpoint

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Wait signals the step by its file and holds until the file is gone.
func TestWaitHoldsUntilRemoved(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hold")
	done := make(chan struct{})
	go func() { Wait(file); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(file); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Wait did not create its file")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("Wait returned while its file was there")
	case <-time.After(100 * time.Millisecond):
	}
	os.Remove(file)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return once its file was removed")
	}
}

// A file that cannot be created is no hold at all.
func TestWaitUnwritable(t *testing.T) {
	start := time.Now()
	Wait(filepath.Join(t.TempDir(), "missing", "hold"))
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Wait held %s on a file it could not create", d)
	}
}
