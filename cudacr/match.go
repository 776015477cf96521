package cudacr

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoMatchingGPU: the target host lacks a GPU the checkpoint needs.
var ErrNoMatchingGPU = errors.New("no matching GPU")

// MatchGPUs pairs every GPU of the checkpointing host (src) with a distinct
// GPU of the restoring host (dst), for Resume's GPUPairs. The same UUID is
// preferred (restore on the same host), then the same model name, then the
// same compute capability: the driver restores onto the same architecture
// only. Memory is not checked here; the caller knows what each GPU held.
func MatchGPUs(src, dst []GPU) ([]GPUPair, error) {
	used := make([]bool, len(dst))
	pairs := make([]GPUPair, 0, len(src))
	rules := []func(a, b GPU) bool{
		func(a, b GPU) bool { return a.UUID == b.UUID },
		func(a, b GPU) bool { return a.Name == b.Name },
		func(a, b GPU) bool { return a.ComputeCapability == b.ComputeCapability },
	}
	matched := make([]bool, len(src))
	for _, same := range rules {
		for i, s := range src {
			if matched[i] {
				continue
			}
			if j := pick(s, dst, used, same); j >= 0 {
				used[j], matched[i] = true, true
				pairs = append(pairs, GPUPair{Old: s.UUID, New: dst[j].UUID})
			}
		}
	}
	for i := range src {
		if !matched[i] {
			return nil, fmt.Errorf("%w: restore needs %s; this host offers %s", ErrNoMatchingGPU, describeGPUs(src), describeGPUs(dst))
		}
	}
	return pairs, nil
}

func pick(s GPU, dst []GPU, used []bool, same func(a, b GPU) bool) int {
	for j, d := range dst {
		if !used[j] && same(s, d) {
			return j
		}
	}
	return -1
}

// describeGPUs: "2× NVIDIA H100 80GB HBM3 (sm_90), 1× NVIDIA A100 (sm_80)".
func describeGPUs(gs []GPU) string {
	if len(gs) == 0 {
		return "no GPU"
	}
	var order []string
	count := map[string]int{}
	for _, g := range gs {
		k := fmt.Sprintf("%s (sm_%s)", g.Name, strings.ReplaceAll(g.ComputeCapability, ".", ""))
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
