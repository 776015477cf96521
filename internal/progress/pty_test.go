package progress

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/console"
)

// TestPseudoTerminal draws through a real pty: the renderer must see a
// terminal, and what reaches the other side is one line redrawn in place
// with bytes and rate, then one finished line.
func TestPseudoTerminal(t *testing.T) {
	master, slavePath, err := console.NewPty()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer master.Close()
	slave, err := os.OpenFile(slavePath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	if err := master.Resize(console.WinSize{Width: 120, Height: 40}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, master) // ends when the slave side closes
		got <- b.String()
	}()

	r := ForFile(slave, false)
	if !r.Terminal() {
		t.Fatal("a pty is a terminal")
	}
	task := r.Start("push example/app:1", 64*mib)
	for i := 0; i < 5; i++ {
		task.Add(4 * mib)
		time.Sleep(150 * time.Millisecond) // a real tick or two
	}
	task.Done()
	slave.Close()
	var out string
	select {
	case out = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no output from the pty")
	}
	// The line discipline turns "\n" into "\r\n".
	if n := strings.Count(out, "\n"); n != 1 {
		t.Fatalf("%d lines, want one line redrawn in place: %q", n, out)
	}
	if n := strings.Count(out, "\r\x1b[K"); n < 4 {
		t.Fatalf("%d redraws: %q", n, out)
	}
	running := out[:strings.LastIndex(out, "\r\x1b[K")]
	mid := lastDrawing(running)
	if !strings.Contains(mid, "MiB / 64.0 MiB") || !strings.Contains(mid, "MiB/s") {
		t.Fatalf("the running line %q lacks bytes or rate", mid)
	}
	final := lastDrawing(out)
	if !strings.HasPrefix(final, "push example/app:1 done in ") || !strings.Contains(final, "(20.0 MiB, ") || !strings.HasSuffix(final, "MiB/s)\r\n") {
		t.Fatalf("final line %q", final)
	}
}
