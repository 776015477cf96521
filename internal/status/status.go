// Package status is the view behind `cryo ps`: the CUDA processes of this
// host with their driver state, the GPU-free pauses cryo recorded, and the
// cryo runs under way, from their locks. It never waits: frozen processes
// are not asked (the driver hangs on them), processes another tracer holds
// are not asked (a cryo call is under way on them), every driver query has
// a short deadline, and the lock directory is read without taking a lock.
package status

import (
	"context"
	"sort"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// The states of Process.State besides the driver's four (running, locked,
// checkpointed, failed).
const (
	// StateFrozen: the process's cgroup is frozen; the driver was not asked.
	StateFrozen = "frozen"
	// StateBusy: another process traces it (a cryo driver call under way,
	// CRIU, a debugger); the driver was not asked.
	StateBusy = "busy"
	// StateUnknown: the driver did not answer in time, or answered an error.
	StateUnknown = "unknown"
)

// Report is the whole view; `cryo ps --json` prints it as it is.
type Report struct {
	Processes []Process `json:"processes"`
	Locks     []Lock    `json:"locks"`
	Pauses    []Pause   `json:"pauses"`
	// Warnings say what could not be read (the GPU inventory, a damaged
	// pause record); the rest of the view stands.
	Warnings []string `json:"warnings,omitempty"`
}

// Process is one CUDA process.
type Process struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	// Container is its container's id when cryo knows it: from a pause
	// record, a lock, or its cgroup's name.
	Container string `json:"container,omitempty"`
	// State is running, locked, checkpointed or failed as the driver
	// reports it, or frozen, busy or unknown (see Detail).
	State string `json:"state"`
	// Stopped: every thread is held in a group stop, as cryo holds a
	// process whose GPU state is away.
	Stopped bool `json:"stopped"`
	// Frozen: its cgroup is frozen.
	Frozen bool `json:"frozen"`
	// TracerPID is the process that ptrace-holds it (state busy), 0 if none.
	TracerPID int `json:"tracer_pid,omitempty"`
	// Detail explains busy and unknown.
	Detail string `json:"detail,omitempty"`
	// GPUs it can see, with the memory it holds on each.
	GPUs []GPU `json:"gpus"`
	// GPUMemory is the sum of GPUs' memory; for a process a pause
	// suspended, what it held before the pause.
	GPUMemory uint64 `json:"gpu_memory_bytes"`
	// Operation is the cryo run that holds its lock ("checkpoint",
	// "cuda suspend", …), "" if none; OperationPID is that cryo's pid.
	Operation    string `json:"operation,omitempty"`
	OperationPID int    `json:"operation_pid,omitempty"`
	// Paused: a GPU-free pause of its container suspended it.
	Paused bool `json:"paused"`
}

// GPU is one GPU a process can see.
type GPU struct {
	Index  int    `json:"index"` // NVML index, -1 if not in this host's inventory
	UUID   string `json:"uuid"`
	Name   string `json:"name,omitempty"`
	Memory uint64 `json:"memory_bytes"`
}

// Lock is one held lock: a cryo run under way.
type Lock struct {
	File string `json:"file"`
	// Key is "id-<container>" or "pid-<N>", "" for a hashed file name.
	Key       string `json:"key,omitempty"`
	HolderPID int    `json:"holder_pid"`
	Operation string `json:"operation"` // checkpoint, restore, pause, resume, cuda suspend, cuda resume
	Target    string `json:"target"`    // "container abc", "pid 42"
	// Checkpoint: a checkpoint is in progress.
	Checkpoint bool `json:"checkpoint"`
}

// Pause is one GPU-free pause record.
type Pause struct {
	Container string         `json:"container"`
	File      string         `json:"file"`
	Processes []PauseProcess `json:"processes"`
}

// PauseProcess is a process a pause suspended.
type PauseProcess struct {
	PID       int    `json:"pid"`
	GPUMemory uint64 `json:"gpu_memory_bytes"` // held before the pause
	Alive     bool   `json:"alive"`
}

// Options say where to look and how to ask the driver.
type Options struct {
	LockDir string
	// Driver answers the state queries and the GPU inventory; its
	// CallTimeout bounds each call.
	Driver *cuda.Driver
	// Parallel caps the driver queries under way at once (≤ 0: 16).
	Parallel int
}

// Collect takes the view. It fails only when /proc cannot be listed;
// anything else it could not learn is a warning or a process's Detail.
func Collect(ctx context.Context, o Options) (*Report, error) {
	r := &Report{Processes: []Process{}, Locks: []Lock{}, Pauses: []Pause{}}
	locks, err := lock.Read(o.LockDir)
	if err != nil {
		r.warn("locks in %s: %v", o.LockDir, err)
	}
	pauses, err := orchestrate.ReadPauses(o.LockDir)
	if err != nil {
		r.warn("%v", err)
	}
	pids, err := scan()
	if err != nil {
		return nil, err
	}
	inv := inventoryAsync(ctx, o.Driver)
	procs := queryAll(ctx, o.Driver, pids, o.Parallel)
	gpus, invErr := inv()
	if invErr != nil && len(procs) > 0 {
		r.warn("GPU inventory: %v", invErr)
	}
	held := heldLocks(locks)
	for i := range procs {
		describe(&procs[i], gpus)
		attach(&procs[i], held, pauses)
	}
	r.Processes = procs
	r.Locks = held
	r.Pauses = pauseList(pauses)
	return r, nil
}

// PIDs are the pids of the processes, for `cryo ps -q`.
func (r *Report) PIDs() []int {
	out := make([]int, 0, len(r.Processes))
	for _, p := range r.Processes {
		out = append(out, p.PID)
	}
	return out
}

func heldLocks(all []lock.Info) []Lock {
	out := []Lock{}
	for _, l := range all {
		if !l.Held {
			continue
		}
		out = append(out, Lock{File: l.Path, Key: l.Key, HolderPID: l.HolderPID, Operation: l.Op, Target: l.Target, Checkpoint: l.Op == "checkpoint"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

func pauseList(all []orchestrate.PauseInfo) []Pause {
	out := []Pause{}
	for _, p := range all {
		ps := Pause{Container: p.ID, File: p.Path, Processes: []PauseProcess{}}
		for _, sp := range p.Processes {
			ps.Processes = append(ps.Processes, PauseProcess{PID: sp.PID, GPUMemory: sp.GPUMemory, Alive: alive(sp.PID)})
		}
		out = append(out, ps)
	}
	return out
}
