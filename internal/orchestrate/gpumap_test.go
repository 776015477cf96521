package orchestrate

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

func TestParseGPUMap(t *testing.T) {
	pairs, err := ParseGPUMap("GPU-a=GPU-b, GPU-b=GPU-a")
	if err != nil || !reflect.DeepEqual(pairs, []cuda.GPUPair{{Old: "GPU-a", New: "GPU-b"}, {Old: "GPU-b", New: "GPU-a"}}) {
		t.Fatalf("%v %v", pairs, err)
	}
	if _, err := ParseGPUMap("nonsense"); err == nil || !strings.Contains(err.Error(), "want OLD-UUID=NEW-UUID") {
		t.Fatalf("nonsense: %v", err)
	}
}

func TestGPUScopeTargets(t *testing.T) {
	inv := cuda.Inventory{GPUs: []cuda.GPU{
		{UUID: "GPU-a", Minor: 0}, {UUID: "GPU-b", Minor: 1}, {UUID: "GPU-c", Minor: 2},
	}}
	uuids := func(sc GPUScope) []string {
		gs, err := sc.Targets(inv)
		if err != nil {
			return []string{err.Error()}
		}
		var u []string
		for _, g := range gs {
			u = append(u, g.UUID)
		}
		return u
	}
	// A CDI or device-plugin spec: the real nodes (195:N), or a stand-in named /dev/nvidiaN.
	spec := &specs.Spec{Linux: &specs.Linux{Devices: []specs.LinuxDevice{
		{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255},
		{Path: "/dev/nvidia2", Type: "c", Major: 195, Minor: 2},
		{Path: "/dev/nvidia1", Type: "c", Major: 1, Minor: 3},
	}}}
	if got := uuids(ScopeFromSpec(spec)); !reflect.DeepEqual(got, []string{"GPU-b", "GPU-c"}) {
		t.Fatalf("nodes: %v", got)
	}
	// NVIDIA_VISIBLE_DEVICES grants GPUs only where the NVIDIA container
	// toolkit's hook acts on it (its legacy mode, nodes not in the spec).
	//lint:ignore SA1019 the toolkit's legacy mode installs its hook as a Prestart hook, as this spec does
	toolkit := &specs.Hooks{Prestart: []specs.Hook{{Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"nvidia-container-runtime-hook", "prestart"}}}}
	env := func(v string) GPUScope {
		return ScopeFromSpec(&specs.Spec{Hooks: toolkit, Process: &specs.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=" + v}}})
	}
	if got := uuids(env("2,GPU-a")); !reflect.DeepEqual(got, []string{"GPU-c", "GPU-a"}) {
		t.Fatalf("NVIDIA_VISIBLE_DEVICES: %v", got)
	}
	if got := uuids(env("all")); len(got) != 3 {
		t.Fatalf("all: %v", got)
	}
	// F9: a pod that names no GPU node and sets NVIDIA_VISIBLE_DEVICES
	// itself (or not at all) gets no GPU, not the host's.
	own := ScopeFromSpec(&specs.Spec{Process: &specs.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}})
	if got := uuids(own); len(got) != 0 {
		t.Fatalf("a spec without GPU nodes or the toolkit's hook: %v, want no GPU", got)
	}
	if got := uuids(ScopeFromSpec(&specs.Spec{})); len(got) != 0 {
		t.Fatalf("a spec without GPU nodes: %v, want no GPU", got)
	}
	if got := uuids(GPUScope{}); len(got) != 3 {
		t.Fatalf("host: %v", got)
	}
	bad := GPUScope{Nodes: []specs.LinuxDevice{{Path: "/dev/nvidia7", Type: "c", Major: 195, Minor: 7}}}
	if _, err := bad.Targets(inv); !errors.Is(err, manifest.ErrIncompatibleHost) {
		t.Fatalf("unknown node: %v", err)
	}
}
