package progress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// clock is a settable clock: the tests advance time instead of sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTest(terminal bool) (*Renderer, *testsupport.Buffer, *clock) {
	buf := &testsupport.Buffer{}
	c := &clock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	r := New(buf, terminal)
	r.now = c.Now
	return r, buf, c
}

const mib = 1 << 20

// lastDrawing is what a terminal shows on its line: the text after the
// last erase.
func lastDrawing(out string) string {
	i := strings.LastIndex(out, "\r\x1b[K")
	if i < 0 {
		return out
	}
	return out[i+len("\r\x1b[K"):]
}

func TestTerminalOneUpdatingLine(t *testing.T) {
	r, buf, c := newTest(true)
	task := r.Start("push example/app:1", 100*mib)
	for i := 0; i < 4; i++ {
		c.Advance(time.Second)
		task.Add(10 * mib)
		r.refresh()
	}
	out := buf.String()
	if strings.Contains(out, "\n") {
		t.Fatalf("a running task wrote a newline: %q", out)
	}
	if n := strings.Count(out, "\r\x1b[K"); n < 5 {
		t.Fatalf("%d redraws, want the start and one per tick: %q", n, out)
	}
	line := lastDrawing(out)
	for _, want := range []string{"push example/app:1", "40.0 MiB / 100.0 MiB", "(40%)", "10.0 MiB/s", "ETA 6.0s"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	task.Done()
	out = buf.String()
	if !strings.HasSuffix(out, "\r\x1b[Kpush example/app:1 done in 4.0s (40.0 MiB, 10.0 MiB/s)\n") {
		t.Fatalf("final line: %q", lastDrawing(out))
	}
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("want exactly one finished line: %q", out)
	}
}

func TestNeverDoneAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("connection refused"), "push a failed after 2.0s (5.0 MiB of 10.0 MiB)\n"},
		{fmt.Errorf("copy: %w", context.Canceled), "push a interrupted after 2.0s (5.0 MiB of 10.0 MiB)\n"},
		{context.DeadlineExceeded, "push a failed after 2.0s (5.0 MiB of 10.0 MiB)\n"},
		{nil, "push a done in 2.0s (5.0 MiB, 2.5 MiB/s)\n"},
	} {
		for _, terminal := range []bool{true, false} {
			r, buf, c := newTest(terminal)
			task := r.Start("push a", 10*mib)
			task.Add(5 * mib)
			c.Advance(2 * time.Second)
			task.End(tc.err)
			task.Done() // a second end is ignored: the first outcome stands
			out := buf.String()
			if !strings.HasSuffix(out, tc.want) || strings.Count(out, " done") > 1 {
				t.Errorf("terminal=%v err=%v: %q, want it to end with %q", terminal, tc.err, out, tc.want)
			}
			if tc.err != nil && strings.Contains(out, "done") {
				t.Errorf("terminal=%v err=%v: says done: %q", terminal, tc.err, out)
			}
		}
	}
}

func TestPlainLinesAreSparse(t *testing.T) {
	r, buf, c := newTest(false)
	task := r.Start("build example/app:1", 100*mib)
	// 1% a second for 30 s: a line for each 10% step (10 s apart here)
	// but never one per tick.
	for i := 0; i < 30; i++ {
		c.Advance(time.Second)
		task.Add(mib)
		r.refresh()
	}
	task.Fail(errors.New("disk full"))
	out := buf.String()
	if strings.Contains(out, "\r") || strings.Contains(out, "\x1b") {
		t.Fatalf("plain output has terminal controls: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{
		"build example/app:1… 100.0 MiB",
		"build example/app:1  10.0 MiB / 100.0 MiB (10%)  1.0 MiB/s  ETA 1m30s",
		"build example/app:1  20.0 MiB / 100.0 MiB (20%)  1.0 MiB/s  ETA 1m20s",
		"build example/app:1  30.0 MiB / 100.0 MiB (30%)  1.0 MiB/s  ETA 1m10s",
		"build example/app:1 failed after 30s (30.0 MiB of 100.0 MiB)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plain output:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
}

func TestPlainLineEveryTenSecondsWithoutTotal(t *testing.T) {
	r, buf, c := newTest(false)
	task := r.Start("dump", 0)
	for i := 0; i < 25; i++ {
		c.Advance(time.Second)
		task.Add(mib)
		r.refresh()
	}
	task.Done()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 4 || lines[0] != "dump…" || !strings.HasPrefix(lines[1], "dump  10.0 MiB") || !strings.HasPrefix(lines[2], "dump  20.0 MiB") ||
		lines[3] != "dump done in 25s (25.0 MiB, 1.0 MiB/s)" {
		t.Fatalf("lines %q", lines)
	}
}

func TestConcurrentTasksShareTheLine(t *testing.T) {
	r, buf, c := newTest(true)
	a := r.Start("pull a", 10*mib)
	b := r.Start("pull b", 20*mib)
	c.Advance(time.Second)
	a.Add(5 * mib)
	b.Add(2 * mib)
	r.refresh()
	line := lastDrawing(buf.String())
	if !strings.Contains(line, "pull a  5.0 MiB / 10.0 MiB") || !strings.Contains(line, " | pull b  2.0 MiB / 20.0 MiB") {
		t.Fatalf("shared line %q", line)
	}
	a.Done()
	out := buf.String()
	// a's final line, then b alone on the line.
	if !strings.Contains(out, "\r\x1b[Kpull a done in 1.0s (5.0 MiB, 5.0 MiB/s)\n\r\x1b[Kpull b  2.0 MiB / 20.0 MiB") {
		t.Fatalf("after a ended: %q", out)
	}
	b.Skip("already exists")
	if !strings.HasSuffix(buf.String(), "\r\x1b[Kpull b skipped: already exists\n") {
		t.Fatalf("skip: %q", buf.String())
	}
}

func TestPrintlnKeepsTheLine(t *testing.T) {
	r, buf, _ := newTest(true)
	task := r.Start("push a", 10*mib)
	r.Println("  blob 0123456789ab skipped: already exists")
	if !strings.HasSuffix(buf.String(), "\r\x1b[K  blob 0123456789ab skipped: already exists\n\r\x1b[Kpush a  0 B / 10.0 MiB (0%)  0 B/s") {
		t.Fatalf("%q", buf.String())
	}
	task.Done()
}

func TestOpaqueShowsElapsedNotProgress(t *testing.T) {
	r, buf, c := newTest(true)
	task := r.StartOpaque("suspending CUDA", 4<<30)
	c.Advance(1500 * time.Millisecond)
	r.refresh()
	if line := lastDrawing(buf.String()); line != "suspending CUDA  4.0 GiB  1.5s" {
		t.Fatalf("opaque line without a rate: %q", line)
	}
	task.SetRate(1 << 30) // a copy measured before: 1 GiB/s
	r.refresh()
	if line := lastDrawing(buf.String()); line != "suspending CUDA  4.0 GiB  1.5s  ETA ~2.5s" {
		t.Fatalf("opaque line with a rate: %q", line)
	}
	c.Advance(3 * time.Second)
	r.refresh()
	if line := lastDrawing(buf.String()); strings.Contains(line, "ETA") {
		t.Fatalf("past its estimate the line must not invent an ETA: %q", line)
	}
	task.Done()
	if !strings.HasSuffix(buf.String(), "suspending CUDA done in 4.5s (4.0 GiB, 910.2 MiB/s)\n") {
		t.Fatalf("%q", buf.String())
	}
}

func TestEstimateOvertaken(t *testing.T) {
	r, buf, c := newTest(true)
	task := r.Start("dumping with CRIU", 0)
	task.SetEstimate(10 * mib)
	c.Advance(time.Second)
	task.Set(12 * mib)
	r.refresh()
	if line := lastDrawing(buf.String()); !strings.Contains(line, "12.0 MiB / ~12.0 MiB (100%)") || strings.Contains(line, "ETA") {
		t.Fatalf("%q", line)
	}
	task.Done()
}

func TestCloseInterrupts(t *testing.T) {
	r, buf, c := newTest(false)
	r.Start("image build", 10*mib).Add(mib)
	r.StartOpaque("resuming CUDA", 0)
	c.Advance(time.Second)
	r.Close()
	out := buf.String()
	if !strings.Contains(out, "image build interrupted after 1.0s (1.0 MiB of 10.0 MiB)\n") || !strings.Contains(out, "resuming CUDA interrupted after 1.0s\n") || strings.Contains(out, "done") {
		t.Fatalf("%q", out)
	}
	if len(r.tasks) != 0 || r.ticker != nil {
		t.Fatalf("tasks or ticker left after Close")
	}
}

func TestQuietIsNil(t *testing.T) {
	r := ForStderr(true)
	if r != nil {
		t.Fatal("quiet must give the nil renderer")
	}
	task := r.Start("x", 1)
	task.Add(1)
	task.SetTotal(2)
	if n, err := task.Write([]byte("ab")); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	task.Poll(time.Millisecond, func() int64 { return 1 })()
	task.Fail(errors.New("x"))
	r.Println("x")
	r.Close()
}

func TestPollAndReader(t *testing.T) {
	r, buf, _ := newTest(false)
	task := r.Start("copy", 0)
	var size int64 = 7
	var mu sync.Mutex
	stop := task.Poll(time.Millisecond, func() int64 { mu.Lock(); defer mu.Unlock(); return size })
	mu.Lock()
	size = 9
	mu.Unlock()
	stop()
	if got := task.done.Load(); got != 9 {
		t.Fatalf("polled %d, want the last reading 9", got)
	}
	var sink bytes.Buffer
	sink.ReadFrom(task.Reader(strings.NewReader("0123456789")))
	if got := task.done.Load(); got != 19 || sink.Len() != 10 {
		t.Fatalf("reader counted to %d", got)
	}
	task.Done()
	if !strings.Contains(buf.String(), "copy done in 0.0s (19 B, ") {
		t.Fatalf("%q", buf.String())
	}
}

func TestTruncateToWidth(t *testing.T) {
	r, buf, _ := newTest(true)
	r.width = func() int { return 20 }
	task := r.Start("a rather long name for a task", 10*mib)
	if line := lastDrawing(buf.String()); len([]rune(line)) != 19 || !strings.HasSuffix(line, "…") {
		t.Fatalf("%q is not cut to 19 columns", line)
	}
	task.Done()
	// The final line is not truncated: it stays in the scrollback.
	if !strings.Contains(buf.String(), "a rather long name for a task done in") {
		t.Fatalf("%q", buf.String())
	}
}

func TestFormats(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 3 << 30: "3.0 GiB"} {
		if got := Human(n); got != want {
			t.Errorf("Human(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{400 * time.Millisecond: "0.4s", 12 * time.Second: "12s", 185 * time.Second: "3m05s", 62 * time.Minute: "1h02m"} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestPlainStartLineWaitsForTheTotal(t *testing.T) {
	r, buf, c := newTest(false)
	task := r.Start("app: dumping with CRIU", 0)
	task.SetEstimate(4 << 30)
	c.Advance(100 * time.Millisecond)
	r.refresh()
	if got := buf.String(); got != "app: dumping with CRIU… ~4.0 GiB\n" {
		t.Fatalf("%q", got)
	}
	task.Done()
}

func TestWriterPrintsAboveTheLine(t *testing.T) {
	r, buf, _ := newTest(true)
	task := r.Start("push a", 10*mib)
	w := r.Writer(nil)
	io.WriteString(w, "level=WARN msg=\"GPU inventory")
	io.WriteString(w, " unavailable\"\nsecond\n")
	want := "\r\x1b[Klevel=WARN msg=\"GPU inventory unavailable\"\n\r\x1b[Kpush a  0 B / 10.0 MiB (0%)  0 B/s\r\x1b[Ksecond\n\r\x1b[Kpush a"
	if !strings.HasSuffix(buf.String(), "\r\x1b[Ksecond\n\r\x1b[Kpush a  0 B / 10.0 MiB (0%)  0 B/s") || !strings.Contains(buf.String(), want) {
		t.Fatalf("%q", buf.String())
	}
	task.Done()
	var fallback bytes.Buffer
	var quiet *Renderer
	if quiet.Writer(&fallback) != io.Writer(&fallback) {
		t.Fatal("a quiet renderer's writer is the fallback")
	}
}

func TestPlainStartLineComesFirst(t *testing.T) {
	r, buf, _ := newTest(false)
	task := r.Start("build a", 3*mib)
	r.Println("build a: layer base 0123456789ab  1.0 KiB")
	task.Done()
	want := "build a… 3.0 MiB\nbuild a: layer base 0123456789ab  1.0 KiB\nbuild a done in 0.0s\n"
	if buf.String() != want {
		t.Fatalf("%q, want %q", buf.String(), want)
	}
}

// TestConcurrentTasksRace: tasks started, counted and ended from many
// goroutines while the ticker draws (run with -race): every task gets
// exactly one end line, and nothing is left drawn after the last.
func TestConcurrentTasksRace(t *testing.T) {
	buf := &testsupport.Buffer{}
	r := New(buf, true)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := r.Start(fmt.Sprintf("pid %d: copy", i), 64*mib)
			for k := 0; k < 20; k++ {
				task.Add(mib)
				time.Sleep(5 * time.Millisecond)
			}
			if i%2 == 0 {
				task.Done()
			} else {
				task.Fail(errors.New("x"))
			}
		}()
	}
	wg.Wait()
	out := buf.String()
	for i := 0; i < 8; i++ {
		want := map[bool]string{true: " done in ", false: " failed after "}[i%2 == 0]
		if n := strings.Count(out, fmt.Sprintf("pid %d: copy%s", i, want)); n != 1 {
			t.Fatalf("pid %d: %d end lines:\n%q", i, n, out)
		}
	}
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("a drawing is left after the last task ended: %q", lastDrawing(out))
	}
	time.Sleep(3 * redrawInterval)
	if buf.String() != out {
		t.Fatal("the renderer draws after its last task ended")
	}
}

// Running gives the counts of the tasks still running, none that ended.
func TestRunningSnapshots(t *testing.T) {
	r := New(io.Discard, false)
	a, b := r.Start("build", 100), r.Start("verify", 0)
	a.Add(40)
	b.Done()
	got := r.Running()
	if len(got) != 1 || got[0] != (Snapshot{Name: "build", Done: 40, Total: 100}) {
		t.Errorf("running %+v", got)
	}
	a.Done()
	if got := r.Running(); len(got) != 0 {
		t.Errorf("after the end: %+v", got)
	}
	if (*Renderer)(nil).Running() != nil {
		t.Error("a quiet renderer has tasks")
	}
}
