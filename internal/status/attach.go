package status

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// describe fills in the GPUs p can see and the memory it holds on each,
// from the inventory and /proc (no driver call). Without an inventory the
// GPUs stay empty.
func describe(p *Process, inv cuda.Inventory) {
	if len(inv.GPUs) == 0 {
		return
	}
	d, err := inv.Describe(p.PID)
	if err != nil {
		return // exited meanwhile, or /proc unreadable: nothing to show
	}
	for _, g := range d.GPUs {
		p.GPUs = append(p.GPUs, GPU{Index: indexOf(inv, g.UUID), UUID: g.UUID, Name: g.Name, Memory: g.Memory})
		p.GPUMemory += g.Memory
	}
}

func indexOf(inv cuda.Inventory, uuid string) int {
	for _, g := range inv.GPUs {
		if g.UUID == uuid {
			return g.Index
		}
	}
	return -1
}

// attach names p's container and the cryo run on it: the held lock of
// its pid, and the pause record that suspended it.
func attach(p *Process, held []Lock, pauses []orchestrate.PauseInfo) {
	for _, l := range held {
		if l.Key != "pid-"+strconv.Itoa(p.PID) {
			continue
		}
		p.Operation, p.OperationPID = l.Operation, l.HolderPID
		if id, ok := strings.CutPrefix(l.Target, "container "); ok {
			p.Container = id
		}
	}
	for _, r := range pauses {
		for _, sp := range r.Processes {
			if sp.PID != p.PID {
				continue
			}
			p.Paused, p.Container = true, r.ID
			if p.GPUMemory == 0 {
				// NVML no longer sees what a suspended process held.
				fromPause(p, sp.GPUs, sp.GPUMemory)
			}
		}
	}
	if p.Container == "" {
		p.Container = cgroupContainer(p.PID)
	}
}

// fromPause takes the GPUs and memory the pause recorded before its
// suspend, keeping the inventory's indices where it gave them.
func fromPause(p *Process, gpus []cuda.ProcessGPU, total uint64) {
	index := map[string]int{}
	for _, g := range p.GPUs {
		index[g.UUID] = g.Index
	}
	if len(gpus) > 0 {
		p.GPUs = p.GPUs[:0]
	}
	for _, g := range gpus {
		i, ok := index[g.UUID]
		if !ok {
			i = -1
		}
		p.GPUs = append(p.GPUs, GPU{Index: i, UUID: g.UUID, Name: g.Name, Memory: g.Memory})
	}
	p.GPUMemory = total
}

// containerCgroup matches the last element of a container's cgroup as
// the common runtimes name it: docker-ID.scope, cri-containerd-ID.scope,
// crio-ID.scope, libpod-ID.scope, or a bare 64-hex id (cgroupfs driver).
var containerCgroup = regexp.MustCompile(`^(?:(?:docker|cri-containerd|crio|libpod|runc)-)?([0-9a-f]{64})(?:\.scope)?$`)

// cgroupContainer is the container id in pid's cgroup name, "" if none.
func cgroupContainer(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	return containerFromCgroup(string(b))
}

func containerFromCgroup(data string) string {
	for _, line := range strings.Split(data, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		path := strings.TrimRight(parts[2], "/")
		last := path[strings.LastIndex(path, "/")+1:]
		if m := containerCgroup.FindStringSubmatch(last); m != nil {
			return m[1]
		}
	}
	return ""
}
