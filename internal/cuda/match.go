package cuda

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrNoMatchingGPU: the restoring host (or container) lacks the GPUs a
// checkpoint's processes need, or a user's GPU map cannot be honoured.
var ErrNoMatchingGPU = errors.New("no matching GPU")

// Placement is one checkpointed CUDA process, as Match places it: the GPUs
// it could see (in CUDA's order) and its CUDA_VISIBLE_DEVICES, which the
// driver applies again at a restore.
type Placement struct {
	Key            int // how the caller finds the process again (its NSPID)
	GPUs           []ProcessGPU
	VisibleDevices VisibleDevices
	// Unrecorded: what the process saw was not recorded (manifests before
	// format 3): its GPUs may go to any of the targets, and no count is
	// enforced.
	Unrecorded bool
}

// Match is cryo's one GPU matcher. For every process it returns the
// one-to-one map, over exactly the GPUs that process could see, onto the
// GPUs it will see after the restore: driver 580 accepts no other gpuPairs
// (one pair for a process that sees two GPUs, or a pair for a GPU it does
// not see, fails with CUDA_ERROR_INVALID_VALUE).
//
// targets are the GPUs the restored processes can open, in CUDA's order:
// those a container's spec gives it, or all of the host's; each process's
// CUDA_VISIBLE_DEVICES narrows them as at start-up. A source GPU keeps its
// UUID where that GPU is a target, else goes to a free target of the same
// model and compute capability, so that one GPU never takes two. user is a
// partial map (old → new UUID) that is honoured first and completed. Each
// target needs free memory for what the processes held on the GPUs mapped
// to it.
func Match(procs []Placement, targets []GPU, user []GPUPair) (map[int][]GPUPair, error) {
	m := &matcher{targets: targets, sees: map[int][]GPU{}, to: map[string]string{}, used: map[string]bool{}}
	if err := m.visible(procs); err != nil {
		return nil, err
	}
	m.sources(procs)
	if err := m.honour(user); err != nil {
		return nil, err
	}
	if err := m.complete(); err != nil {
		return nil, err
	}
	if err := m.memory(); err != nil {
		return nil, err
	}
	out := map[int][]GPUPair{}
	for _, p := range procs {
		pairs := make([]GPUPair, 0, len(p.GPUs))
		for _, g := range p.GPUs {
			pairs = append(pairs, GPUPair{Old: g.UUID, New: m.to[g.UUID]})
		}
		out[p.Key] = pairs
	}
	return out, nil
}

type source struct {
	gpu    ProcessGPU
	memory uint64 // summed over the processes
	seenBy []int  // process keys
}

type matcher struct {
	targets []GPU
	sees    map[int][]GPU // process key → the targets it will see
	srcs    []*source
	to      map[string]string // source UUID → target UUID
	used    map[string]bool   // target UUIDs taken
}

// visible works out what each process will see, and refuses a process
// that would see a different number of GPUs than it saw.
func (m *matcher) visible(procs []Placement) error {
	for _, p := range procs {
		sees, err := p.VisibleDevices.Select(m.targets)
		if err != nil {
			return err
		}
		if p.Unrecorded {
			m.sees[p.Key] = sees
			continue
		}
		if len(sees) != len(p.GPUs) {
			return report.WithRemedy(fmt.Errorf("%w: process %d saw %s at checkpoint; after the restore it would see %s (%s): the driver restores a process only onto as many GPUs as it saw",
				ErrNoMatchingGPU, p.Key, describeProcessGPUs(p.GPUs), describeGPUs(sees), p.VisibleDevices),
				fmt.Sprintf("give the restored container exactly %d GPU(s) of that model", len(p.GPUs)))
		}
		m.sees[p.Key] = sees
	}
	return nil
}

func (m *matcher) sources(procs []Placement) {
	byUUID := map[string]*source{}
	for _, p := range procs {
		for _, g := range p.GPUs {
			s := byUUID[g.UUID]
			if s == nil {
				s = &source{gpu: g}
				byUUID[g.UUID] = s
				m.srcs = append(m.srcs, s)
			}
			s.memory += g.Memory
			s.seenBy = append(s.seenBy, p.Key)
		}
	}
}

// candidates are the free targets of s's model that every process seeing
// s will see.
func (m *matcher) candidates(s *source) []GPU {
	var out []GPU
	for _, t := range m.targets {
		if !m.used[t.UUID] && sameModel(s.gpu, t) && m.allSee(s, t.UUID) {
			out = append(out, t)
		}
	}
	return out
}

func (m *matcher) allSee(s *source, uuid string) bool {
	for _, k := range s.seenBy {
		if !containsUUID(m.sees[k], uuid) {
			return false
		}
	}
	return true
}

// honour applies the user's partial map, refusing what cannot be done.
func (m *matcher) honour(user []GPUPair) error {
	for _, e := range user {
		s := m.find(e.Old)
		if s == nil {
			return fmt.Errorf("%w: the GPU map names %s, which the checkpoint's processes did not use (they used %s)", ErrNoMatchingGPU, e.Old, m.describeSources())
		}
		t, ok := findGPU(m.targets, e.New)
		switch {
		case !ok:
			return fmt.Errorf("%w: the GPU map sends %s to %s, which is not among the GPUs the restored processes can use (%s; see nvidia-smi -L)", ErrNoMatchingGPU, e.Old, e.New, describeUUIDs(m.targets))
		case !sameModel(s.gpu, t):
			return fmt.Errorf("%w: the GPU map sends %s (%s) to %s (%s): the driver restores only onto the same model", ErrNoMatchingGPU, e.Old, s.gpu.Name, e.New, t.Name)
		case m.to[e.Old] != "" || m.used[e.New]:
			return fmt.Errorf("%w: the GPU map names %s or %s twice: each GPU maps to exactly one other", ErrNoMatchingGPU, e.Old, e.New)
		case !m.allSee(s, e.New):
			return fmt.Errorf("%w: the GPU map sends %s to %s, which a process that used %s will not see after the restore (its CUDA_VISIBLE_DEVICES, or the container's GPUs)", ErrNoMatchingGPU, e.Old, e.New, e.Old)
		}
		m.to[e.Old], m.used[e.New] = e.New, true
	}
	return nil
}

// complete maps every source the user did not, the most constrained
// first: its own UUID if free, else the first free target with room.
func (m *matcher) complete() error {
	todo := []*source{}
	for _, s := range m.srcs {
		if m.to[s.gpu.UUID] == "" {
			todo = append(todo, s)
		}
	}
	for len(todo) > 0 {
		sort.SliceStable(todo, func(i, j int) bool { return len(m.candidates(todo[i])) < len(m.candidates(todo[j])) })
		s := todo[0]
		todo = todo[1:]
		t, ok := pickTarget(s, m.candidates(s))
		if !ok {
			return m.noTarget(s)
		}
		m.to[s.gpu.UUID], m.used[t.UUID] = t.UUID, true
	}
	return nil
}

func pickTarget(s *source, cands []GPU) (GPU, bool) {
	fits := func(t GPU) bool { return t.MemoryFree >= s.memory }
	for _, t := range cands {
		if t.UUID == s.gpu.UUID && fits(t) {
			return t, true
		}
	}
	for _, t := range cands {
		if fits(t) {
			return t, true
		}
	}
	if len(cands) > 0 {
		return cands[0], true // memory() says what is short
	}
	return GPU{}, false
}

func (m *matcher) noTarget(s *source) error {
	return fmt.Errorf("%w: restore needs %s; this host offers %s to the restored processes: %s (the checkpoint ran on %s)", ErrNoMatchingGPU,
		describeNeed(s.gpu.Name, s.gpu.ComputeCapability, s.memory), describeGPUs(m.targets), m.describeTargets(), s.gpu.UUID)
}

// memory refuses a target whose free memory cannot take what the sources
// mapped to it held.
func (m *matcher) memory() error {
	for _, s := range m.srcs {
		t, _ := findGPU(m.targets, m.to[s.gpu.UUID])
		if t.MemoryFree < s.memory {
			return report.WithRemedy(fmt.Errorf("%w: restore needs %s on %s (for what ran on %s); it has %s free",
				ErrNoMatchingGPU, gib(s.memory), t.UUID, s.gpu.UUID, gib(t.MemoryFree)),
				"free GPU memory there, or map it elsewhere")
		}
	}
	return nil
}

func (m *matcher) find(uuid string) *source {
	for _, s := range m.srcs {
		if s.gpu.UUID == uuid {
			return s
		}
	}
	return nil
}

func (m *matcher) describeSources() string {
	var u []string
	for _, s := range m.srcs {
		u = append(u, s.gpu.UUID)
	}
	return strings.Join(u, ", ")
}

func (m *matcher) describeTargets() string {
	var parts []string
	for _, t := range m.targets {
		state := "free " + gib(t.MemoryFree)
		if m.used[t.UUID] {
			state = "taken"
		}
		parts = append(parts, fmt.Sprintf("%s (%s, %s, %s)", t.UUID, t.Name, sm(t.ComputeCapability), state))
	}
	if len(parts) == 0 {
		return "no GPU"
	}
	return strings.Join(parts, "; ")
}

func sameModel(s ProcessGPU, t GPU) bool {
	return s.Name == t.Name && s.ComputeCapability == t.ComputeCapability
}

func findGPU(gs []GPU, uuid string) (GPU, bool) {
	for _, g := range gs {
		if g.UUID == uuid {
			return g, true
		}
	}
	return GPU{}, false
}

func containsUUID(gs []GPU, uuid string) bool {
	_, ok := findGPU(gs, uuid)
	return ok
}

func describeUUIDs(gs []GPU) string {
	if len(gs) == 0 {
		return "none"
	}
	var u []string
	for _, g := range gs {
		u = append(u, g.UUID)
	}
	return strings.Join(u, ", ")
}

func describeProcessGPUs(ps []ProcessGPU) string {
	gs := make([]GPU, len(ps))
	for i, p := range ps {
		gs[i] = GPU{Name: p.Name, ComputeCapability: p.ComputeCapability}
	}
	return describeGPUs(gs)
}

func describeNeed(name, cc string, mem uint64) string {
	s := fmt.Sprintf("1× %s (%s)", name, sm(cc))
	if mem > 0 {
		s += " with ≥ " + gib(mem) + " free"
	}
	return s
}

// describeGPUs: "2× NVIDIA H100 80GB HBM3 (sm_90), 1× NVIDIA A100 (sm_80)".
func describeGPUs(gs []GPU) string {
	if len(gs) == 0 {
		return "no GPU"
	}
	var order []string
	count := map[string]int{}
	for _, g := range gs {
		k := fmt.Sprintf("%s (%s)", g.Name, sm(g.ComputeCapability))
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%d× %s", count[k], k)
	}
	return strings.Join(parts, ", ")
}

// DescribeGPUs is describeGPUs for the host check's messages.
func DescribeGPUs(gs []GPU) string { return describeGPUs(gs) }

func sm(cc string) string {
	if cc == "" {
		return "sm_?"
	}
	return "sm_" + strings.ReplaceAll(cc, ".", "")
}

// GiB is b bytes in GiB (2³⁰ bytes).
func GiB(b uint64) float64 { return float64(b) / (1 << 30) }

// gib formats b bytes as "9.2 GiB".
func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", GiB(b)) }
