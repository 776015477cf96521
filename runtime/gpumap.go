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

// applyGPUMap replaces the automatic choice of target GPU with the user's,
// after checking that each named GPU exists here and is of the same model as
// the one the automatic match chose (the driver cannot restore across models).
func (o *Orchestrator) applyGPUMap(pairs []cudacr.GPUPair, host cudacr.Inventory) ([]cudacr.GPUPair, error) {
	explicit, err := o.gpuMap()
	if err != nil || len(explicit) == 0 {
		return pairs, err
	}
	byUUID := map[string]cudacr.GPU{}
	for _, g := range host.GPUs {
		byUUID[g.UUID] = g
	}
	out := append([]cudacr.GPUPair(nil), pairs...)
	for _, e := range explicit {
		i := indexOld(out, e.Old)
		if i < 0 {
			return nil, fmt.Errorf("GPU map names %s, which the checkpoint did not use: %w", e.Old, snapshot.ErrIncompatibleHost)
		}
		want, ok := byUUID[e.New]
		if !ok {
			return nil, fmt.Errorf("GPU map names %s, which this host does not have (see nvidia-smi -L): %w", e.New, snapshot.ErrIncompatibleHost)
		}
		if auto := byUUID[out[i].New]; auto.Name != want.Name || auto.ComputeCapability != want.ComputeCapability {
			return nil, fmt.Errorf("GPU map sends %s to %s (%s), but the checkpoint needs a %s: %w", e.Old, e.New, want.Name, auto.Name, snapshot.ErrIncompatibleHost)
		}
		out[i].New = e.New
	}
	return out, nil
}

func indexOld(pairs []cudacr.GPUPair, old string) int {
	for i, p := range pairs {
		if p.Old == old {
			return i
		}
	}
	return -1
}
