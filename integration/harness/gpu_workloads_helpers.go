package harness

import (
	"os"
	"testing"
	"time"
)

func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// remove kills and deletes the container, ignoring a missing one.
func (c *RuncContainer) Remove() {
	_, _ = RunErr(30*time.Second, nil, c.Runc, "--root", c.Root, "kill", c.ID, "KILL")
	_, _ = RunErr(30*time.Second, nil, c.Runc, "--root", c.Root, "delete", "--force", c.ID)
}

// kill sends a signal to the container's init.
func (c *RuncContainer) Kill(sig string) {
	c.T.Helper()
	Run(c.T, 30*time.Second, nil, c.Runc, "--root", c.Root, "kill", c.ID, sig)
}

// checkpoint runs `<runc> checkpoint --image-path img [extra]` and returns its duration.
func (c *RuncContainer) Checkpoint(img string, extra ...string) time.Duration {
	c.T.Helper()
	args := append(append(c.globals(), "checkpoint", "--image-path", img), extra...)
	return Timed(c.T, nil, c.Runc, append(args, c.ID)...)
}

// restore runs `<runc> restore -d` from img with a fresh stdio pipe.
func (c *RuncContainer) Restore(img string) time.Duration {
	c.T.Helper()
	return c.Start("restore", "-d", "--image-path", img, "--bundle", c.Bundle, c.ID)
}
