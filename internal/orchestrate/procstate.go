package orchestrate

import (
	"fmt"
	"strings"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// procsNow says what pids are at this moment, for an error's outcome: a
// message must not say "the processes run" of processes that cryo holds
// stopped, or that have died.
func procsNow(pids []int) string {
	var held, running, gone []int
	for _, pid := range pids {
		switch {
		case !procfs.Alive(pid):
			gone = append(gone, pid)
		case cuda.Stopped(pid):
			held = append(held, pid)
		default:
			running = append(running, pid)
		}
	}
	var parts []string
	if len(held) > 0 {
		parts = append(parts, fmt.Sprintf("%s held stopped, with CUDA still suspended: none of their threads runs without its GPU state", numbered(held, "is", "are")))
	}
	if len(running) > 0 {
		parts = append(parts, numbered(running, "runs", "run"))
	}
	if len(gone) > 0 {
		parts = append(parts, numbered(gone, "has exited", "have exited"))
	}
	if len(parts) == 0 {
		return "no process of it is known"
	}
	return strings.Join(parts, "; ")
}

// numbered is "process [7] runs" or "processes [7 8] run".
func numbered(pids []int, one, many string) string {
	if len(pids) == 1 {
		return fmt.Sprintf("process %v %s", pids, one)
	}
	return fmt.Sprintf("processes %v %s", pids, many)
}
