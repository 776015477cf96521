package harness

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// GPUMiB is the device memory the workload fills: $CRYO_GPU_MIB, default 1024.
func GPUMiB() string {
	if v := os.Getenv("CRYO_GPU_MIB"); v != "" {
		return v
	}
	return "1024"
}

// Timed runs a command and returns its duration, failing the test on error.
func Timed(t *testing.T, env []string, name string, args ...string) time.Duration {
	t.Helper()
	start := time.Now()
	out := Run(t, 8*time.Minute, env, name, args...)
	d := time.Since(start)
	t.Logf("%s %s (%.2fs)\n%s", filepath.Base(name), strings.Join(args, " "), d.Seconds(), out)
	return d
}

var tickRe = regexp.MustCompile(`(?m)^tick (\d+) counter=(\d+) verify=(OK|BAD)`)

// LastTick returns the last tick number in out and fails on any verify=BAD.
func LastTick(t *testing.T, out string) int {
	t.Helper()
	if strings.Contains(out, "verify=BAD") || strings.Contains(out, "cuda error") {
		t.Fatalf("workload reports broken GPU state:\n%s", Tail(out, 20))
	}
	m := tickRe.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// WaitTicks waits until the output read by get has a tick beyond after.
func WaitTicks(t *testing.T, get func() string, after int, what string) int {
	t.Helper()
	var n int
	WaitFor(t, 90*time.Second, what, func() bool {
		n = LastTick(t, get())
		return n > after
	})
	return n
}

// ReadFile returns a file's content, or "" if it cannot be read yet.
func ReadFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
