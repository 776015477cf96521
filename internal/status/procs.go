package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"syscall"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// scan lists the processes of this host that map the CUDA driver, cryo's
// own processes left out: its driver helpers map libcuda too, but they are
// cryo at work, not workloads (a held lock shows that work).
func scan() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	self := exeID(os.Getpid())
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !procfs.Alive(pid) {
			continue
		}
		if ok, _ := cuda.MapsDriver(pid); !ok || (self != (fileID{}) && exeID(pid) == self) {
			continue
		}
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids, nil
}

// CUDAPIDs lists the processes of this host that map the CUDA driver,
// cryo's own left out, without asking the driver: for shell completion,
// which must answer at once.
func CUDAPIDs() ([]int, error) { return scan() }

// fileID names an executable by device and inode, so that cryo's other
// names (cryo-runc, the shim: links to one binary) count as cryo too.
type fileID struct{ dev, ino uint64 }

func exeID(pid int) fileID {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(pid)+"/exe", &st); err != nil {
		return fileID{}
	}
	return fileID{uint64(st.Dev), st.Ino}
}

// queryAll learns the state of each pid, at most parallel driver queries
// at once; a pid that exits meanwhile, or that the driver says holds no
// CUDA state, is left out.
func queryAll(ctx context.Context, d *cuda.Driver, pids []int, parallel int) []Process {
	if parallel <= 0 {
		parallel = 16
	}
	out := make([]Process, len(pids))
	keep := make([]bool, len(pids))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, pid := range pids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], keep[i] = query(ctx, d, pid)
		}()
	}
	wg.Wait()
	var procs []Process
	for i := range out {
		if keep[i] {
			procs = append(procs, out[i])
		}
	}
	if procs == nil {
		procs = []Process{}
	}
	return procs
}

// query is one process's state. The driver is asked only when it can
// answer: not for a frozen process (its calls hang there), not for one
// that another tracer holds (a cryo call under way on it).
func query(ctx context.Context, d *cuda.Driver, pid int) (Process, bool) {
	p := Process{PID: pid, Command: procfs.Comm(pid), Stopped: cuda.Stopped(pid), Frozen: procfs.Frozen(pid), GPUs: []GPU{}}
	if p.Frozen {
		p.State = StateFrozen
		return p, true
	}
	if t := procfs.Tracer(pid); t > 0 {
		p.State, p.TracerPID = StateBusy, t
		p.Detail = busyDetail(t)
		return p, true
	}
	st, err := d.State(ctx, pid)
	return classify(p, st, err)
}

func busyDetail(tracer int) string {
	name := cmp.Or(procfs.Comm(tracer), "gone")
	if id := exeID(tracer); id != (fileID{}) && id == exeID(os.Getpid()) {
		name = "cryo" // its driver helper, re-executed as /proc/self/exe
	}
	return fmt.Sprintf("traced by pid %d (%s): a cryo call may be under way", tracer, name)
}

// classify turns a state query's answer into the process's row, or drops
// the process (false) when it is gone or holds no CUDA state.
func classify(p Process, st cuda.State, err error) (Process, bool) {
	switch {
	case err == nil:
		p.State = st.String()
	case errors.Is(err, cuda.ErrNoProcess):
		return p, false
	case errors.Is(err, cuda.ErrTimeout):
		p.State, p.Detail = StateUnknown, "driver did not answer"
		if t := procfs.Tracer(p.PID); t > 0 {
			// A cryo call began while this one waited.
			p.State, p.TracerPID, p.Detail = StateBusy, t, busyDetail(t)
		}
	case errors.Is(err, cuda.ErrNotCUDA):
		return p, false // libcuda mapped, CUDA never initialised
	default:
		p.State, p.Detail = StateUnknown, err.Error()
	}
	return p, true
}

// inventoryAsync starts the GPU inventory (NVML, in the driver's helper)
// while the state queries run, and returns a function that waits for it.
func inventoryAsync(ctx context.Context, d *cuda.Driver) func() (cuda.Inventory, error) {
	var inv cuda.Inventory
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		inv, err = d.Inventory(ctx)
	}()
	return func() (cuda.Inventory, error) { <-done; return inv, err }
}

func alive(pid int) bool { return procfs.Alive(pid) }
