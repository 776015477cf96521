package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestCLIProgressOnTerminal: on a terminal, a long step is one line redrawn
// in place (carriage return, erase line) with the bytes done, the rate and
// an ETA, finished once with "done"; off a terminal the same run prints
// plain lines with no carriage return.
func TestCLIProgressOnTerminal(t *testing.T) {
	harness.RequireRoot(t)
	// 768 MiB resident: tail keeps the last N bytes of an endless input, so
	// the dump writes that much and takes long enough to be redrawn.
	p := harness.StartBare(t, nil, nil, "sh -c 'cat /dev/zero | tail -c 805306368'")
	harness.WaitFor(t, 60*time.Second, "768 MiB resident", func() bool { return treeRSSKiB(p.PID) > 700<<10 })
	tree := treePIDs(p.PID)
	img := filepath.Join(t.TempDir(), "img")
	done := filepath.Join(t.TempDir(), "exit")
	term := startOnPty(t, "sh", "-c", harness.CryoBin(t, "cryo")+" checkpoint --pid "+strconv.Itoa(p.PID)+" --dir "+img+"; echo $? > "+done)
	harness.WaitFor(t, 2*time.Minute, "the checkpoint to end", func() bool { return fileHas(done, "0") })
	out := term.Output()

	// Every redraw of the dump's line starts with \r and an erase; the line
	// shows bytes of a total and a rate while it runs.
	redraw := regexp.MustCompile(`\r\x1b\[Kpid \d+: dumping with CRIU +[0-9.]+ [KMG]iB / ~?[0-9.]+ [KMG]iB [^\r\n]*[KMG]iB/s`)
	if n := len(redraw.FindAllString(out, -1)); n < 2 {
		t.Fatalf("want the dump's line redrawn in place with bytes and rate (found %d redraws):\n%q", n, out)
	}
	final := regexp.MustCompile(`pid \d+: dumping with CRIU done in [0-9.]+m?s \([0-9.]+ [KMG]iB, [0-9.]+ [KMG]iB/s\)\r?\n`)
	if !final.MatchString(out) {
		t.Fatalf("no final line for the dump:\n%q", out)
	}
	// The dump took one line of the terminal: its redraws have no newline.
	if c := strings.Count(out, "dumping with CRIU"); c > 1 && strings.Count(between(out, "dumping with CRIU", "done in"), "\n") > 0 {
		t.Fatalf("the dump's line was not redrawn in place:\n%q", out)
	}

	// Off a terminal: no carriage returns, no escapes.
	killDumped(t, p)
	// A 768 MiB process takes a moment to be reaped once killed: its pid
	// stays taken (a zombie) until then, and the restore needs it.
	harness.WaitFor(t, time.Minute, "the dumped tree to be reaped", func() bool {
		for _, pid := range tree {
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
				return false
			}
		}
		return true
	})
	plain := harness.BareCryo(t, nil, "restore", "--dir", img)
	if strings.ContainsAny(plain, "\r\x1b") {
		t.Fatalf("progress off a terminal has control characters:\n%q", plain)
	}
	harness.WantIn(t, plain, "restoring with CRIU", "done in")
}

// treePIDs are pid and its descendants.
func treePIDs(pid int) []int {
	out := []int{pid}
	for _, c := range strings.Fields(harness.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(pid), "children"))) {
		if cp, err := strconv.Atoi(c); err == nil {
			out = append(out, treePIDs(cp)...)
		}
	}
	return out
}

// treeRSSKiB is the resident memory of pid and its descendants.
func treeRSSKiB(pid int) int {
	n := rssKiB(pid)
	for _, c := range strings.Fields(harness.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(pid), "children"))) {
		if cp, err := strconv.Atoi(c); err == nil {
			n += treeRSSKiB(cp)
		}
	}
	return n
}

// rssKiB is a process's resident memory, 0 if unknown.
func rssKiB(pid int) int {
	for _, l := range strings.Split(harness.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status")), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

func fileHas(path, want string) bool { return strings.TrimSpace(harness.ReadFile(path)) == want }

// between is s from the first a to the first b after it.
func between(s, a, b string) string {
	i := strings.Index(s, a)
	if i < 0 {
		return ""
	}
	j := strings.Index(s[i:], b)
	if j < 0 {
		return s[i:]
	}
	return s[i : i+j]
}
