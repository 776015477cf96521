package harness

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// RuncContainer is a GPU container run by cryo-runc with its stdio on a pipe
// that the test reads, as containerd and Podman do (CRIU cannot dump stdio
// that points at host files outside the container).
type RuncContainer struct {
	T      *testing.T
	Runc   string // cryo-runc, or the raw runc for the baseline
	Root   string // runc --root
	Bundle string
	ID     string
	Log    *testsupport.Buffer
	CRIU   string // runc --criu: the benchmarks' raw baseline runs stock CRIU
	RunLog string // runc --log: the benchmarks read cryo-runc's restore steps there
}

// globals are runc's global flags for this container: its state root and,
// where set, the CRIU binary and the log file.
func (c *RuncContainer) globals() []string {
	g := []string{"--root", c.Root}
	if c.CRIU != "" {
		g = append(g, "--criu", c.CRIU)
	}
	if c.RunLog != "" {
		g = append(g, "--log", c.RunLog)
	}
	return g
}

// start runs `runc run -d` or `runc restore -d` with stdio on a fresh pipe.
func (c *RuncContainer) Start(args ...string) time.Duration {
	c.T.Helper()
	cmd := exec.Command(c.Runc, append(c.globals(), args...)...)
	cmd.Dir = c.Bundle
	r, w, err := os.Pipe()
	if err != nil {
		c.T.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, w, w
	go func() { _, _ = io.Copy(c.Log, r); r.Close() }()
	start := time.Now()
	err = cmd.Run()
	d := time.Since(start)
	w.Close()
	if err != nil {
		c.T.Fatalf("%s %s: %v\n%s", filepath.Base(c.Runc), strings.Join(args, " "), err, c.Log.String())
	}
	return d
}

func (c *RuncContainer) PID() int {
	c.T.Helper()
	out := Run(c.T, 30*time.Second, nil, c.Runc, "--root", c.Root, "state", c.ID)
	var st struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		c.T.Fatalf("runc state: %v: %s", err, out)
	}
	return st.Pid
}

func (c *RuncContainer) TicksAfter(n int, what string) int {
	return WaitTicks(c.T, c.Log.String, n, what)
}
