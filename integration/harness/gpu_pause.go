package harness

import (
	"encoding/json"
	"time"
)

// assertPaused checks that runc reports the container paused and that it
// prints no tick past n meanwhile.
func (c *RuncContainer) AssertPaused(n int) {
	c.T.Helper()
	if st := c.Status(); st != "paused" {
		c.T.Fatalf("container %s is %s, want paused", c.ID, st)
	}
	last := LastTick(c.T, c.Log.String())
	time.Sleep(500 * time.Millisecond)
	if now := LastTick(c.T, c.Log.String()); now != last || now < n {
		c.T.Fatalf("container %s ticked %d→%d while paused", c.ID, last, now)
	}
}

// status is runc's state of the container: running, paused, stopped.
func (c *RuncContainer) Status() string {
	c.T.Helper()
	out := Run(c.T, 30*time.Second, nil, c.Runc, "--root", c.Root, "state", c.ID)
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		c.T.Fatalf("runc state: %v: %s", err, out)
	}
	return st.Status
}
