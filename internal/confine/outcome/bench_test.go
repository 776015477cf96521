package outcome

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkCheck200Threads checks a process of 201 threads, every check
// but the mount table and /dev (the child shares the host's). Set
// CRYO_THREADS_BIN to a program that starts 200 threads.
func BenchmarkCheck200Threads(b *testing.B) {
	bin := os.Getenv("CRYO_THREADS_BIN")
	if bin == "" {
		b.Skip("CRYO_THREADS_BIN names no program")
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(200 * time.Millisecond)
	t := &testing.T{}
	_, w := selfSpec(t)
	w.Spec.Linux.Namespaces = nil
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := checkProcess(cmd.Process.Pid, w); err != nil {
			b.Fatal(err)
		}
	}
}
