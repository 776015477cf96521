package runtime

import (
	"fmt"
	"strings"

	"github.com/cryo-gpu/cryo/cudacr"
	"github.com/cryo-gpu/cryo/cudacr/proc"
)

// procsNow says what pids are at this moment, for an error's outcome: a
// message must not say "the processes run" of processes that cryo holds
// stopped, or that have died.
func procsNow(pids []int) string {
	var held, running, gone []int
	for _, pid := range pids {
		switch {
		case !proc.Alive(pid):
			gone = append(gone, pid)
		case cudacr.Stopped(pid):
			held = append(held, pid)
		default:
			running = append(running, pid)
		}
	}
	var parts []string
	if len(held) > 0 {
		parts = append(parts, fmt.Sprintf("process(es) %v are held stopped, with CUDA still suspended: none of their threads runs without its GPU state", held))
	}
	if len(running) > 0 {
		parts = append(parts, fmt.Sprintf("process(es) %v run", running))
	}
	if len(gone) > 0 {
		parts = append(parts, fmt.Sprintf("process(es) %v have exited", gone))
	}
	if len(parts) == 0 {
		return "no process of it is known"
	}
	return strings.Join(parts, "; ")
}
