package runtime

import (
	"fmt"
	"os"
	"strings"

	"github.com/cryo-gpu/cryo/cudacr"
	"github.com/cryo-gpu/cryo/snapshot"
)

// GPUMapEnv names the environment variable that front ends without flags of
// their own (cryo-runc under Podman, the shim) read the GPU map from:
// "OLD-UUID=NEW-UUID[,OLD-UUID=NEW-UUID…]".
const GPUMapEnv = "CRYO_GPU_MAP"

// ParseGPUMap parses "OLD=NEW[,OLD=NEW…]" (GPU UUIDs as nvidia-smi -L prints them).
func ParseGPUMap(spec string) ([]cudacr.GPUPair, error) {
	var pairs []cudacr.GPUPair
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		old, nw, ok := strings.Cut(item, "=")
		if !ok || !strings.HasPrefix(old, "GPU-") || !strings.HasPrefix(nw, "GPU-") {
			return nil, fmt.Errorf("GPU map %q: want OLD-UUID=NEW-UUID, e.g. GPU-0b1c…=GPU-7f2e… (see nvidia-smi -L): %w", item, snapshot.ErrIncompatibleHost)
		}
		pairs = append(pairs, cudacr.GPUPair{Old: old, New: nw})
	}
	return pairs, nil
}

// gpuMap is the explicit map: the option, else the environment.
func (o *Orchestrator) gpuMap() ([]cudacr.GPUPair, error) {
	if o.GPUMap != nil {
		return o.GPUMap, nil
	}
	if spec := os.Getenv(GPUMapEnv); spec != "" {
		return ParseGPUMap(spec)
	}
	return nil, nil
}
