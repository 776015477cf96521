package cli

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cryo-gpu/cryo/cudacr"
	"github.com/cryo-gpu/cryo/runtime"
)

// progressPrinter reports each driver step on stderr. Checkpoint and restore
// copy GPU memory and can take many seconds, so while one runs it prints the
// elapsed time every second: a user sees work, not a hang.
func progressPrinter() func(cudacr.Progress) {
	var mu sync.Mutex
	// One ticker per process: the processes of a set are copied in parallel.
	stops := map[int]chan struct{}{}
	return func(p cudacr.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if !p.Done {
			fmt.Fprintf(os.Stderr, "pid %d: %s…\n", p.PID, p.Step)
			if p.Step == "checkpoint" || p.Step == "restore" {
				stops[p.PID] = make(chan struct{})
				go tick(fmt.Sprintf("pid %d: %s", p.PID, p.Step), stops[p.PID])
			}
			return
		}
		if stop, ok := stops[p.PID]; ok {
			close(stop)
			delete(stops, p.PID)
		}
		if p.Err != nil {
			fmt.Fprintf(os.Stderr, "pid %d: %s failed after %s: %v\n", p.PID, p.Step, p.Elapsed.Round(time.Millisecond), p.Err)
			return
		}
		fmt.Fprintf(os.Stderr, "pid %d: %s done in %s\n", p.PID, p.Step, p.Elapsed.Round(time.Millisecond))
	}
}

// tick prints "label… elapsed" every second until stop is closed.
func tick(label string, stop chan struct{}) {
	start := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fmt.Fprintf(os.Stderr, "%s… %s\n", label, time.Since(start).Round(time.Second))
		}
	}
}

// stepPrinter prints the long steps with their elapsed time, ticking every
// second while one runs so that a user sees work, not a hang.
func stepPrinter() func(runtime.Event) {
	long := map[runtime.Step]string{
		runtime.StepSuspend: "suspending CUDA", runtime.StepDump: "dumping with CRIU",
		runtime.StepResume: "resuming CUDA", runtime.StepDigests: "hashing image files",
		runtime.StepRollback: "rolling back: resuming CUDA", runtime.StepVerify: "verifying checkpoint",
		runtime.StepComplete: "completing a checkpoint interrupted after its dump: hashing its files as they are now",
		runtime.StepRestore:  "restoring with CRIU", runtime.StepPorts: "waiting for the listening ports to leave TIME_WAIT",
	}
	var stop chan struct{}
	return func(e runtime.Event) {
		what, ok := long[e.Step]
		if !ok {
			return
		}
		if !e.Done {
			fmt.Fprintf(os.Stderr, "%s: %s…\n", e.ID, what)
			stop = make(chan struct{})
			go tick(e.ID+": "+what, stop)
			return
		}
		close(stop)
		if e.Err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s failed after %s\n", e.ID, what, e.Elapsed.Round(time.Millisecond))
			return
		}
		fmt.Fprintf(os.Stderr, "%s: %s done in %s\n", e.ID, what, e.Elapsed.Round(time.Millisecond))
	}
}
