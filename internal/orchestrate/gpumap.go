package orchestrate

import (
	"fmt"
	"strings"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// ParseGPUMap parses "OLD=NEW[,OLD=NEW…]" (GPU UUIDs as nvidia-smi -L prints them).
func ParseGPUMap(spec string) ([]cuda.GPUPair, error) {
	var pairs []cuda.GPUPair
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		old, nw, ok := strings.Cut(item, "=")
		if !ok || !strings.HasPrefix(old, "GPU-") || !strings.HasPrefix(nw, "GPU-") {
			return nil, fmt.Errorf("GPU map %q: want OLD-UUID=NEW-UUID, e.g. GPU-0b1c…=GPU-7f2e… (see nvidia-smi -L): %w", item, manifest.ErrIncompatibleHost)
		}
		pairs = append(pairs, cuda.GPUPair{Old: old, New: nw})
	}
	return pairs, nil
}

// userMap is the explicit map: the option, else the configured one
// ($CRYO_GPU_MAP, for front ends without flags of their own).
func (h hostCheck) userMap() ([]cuda.GPUPair, error) {
	if h.pairs != nil {
		return h.pairs, nil
	}
	if spec := h.spec; spec != "" {
		return ParseGPUMap(spec)
	}
	return nil, nil
}
