package cudacr

import (
	"errors"
	"reflect"
	"testing"
)

func TestMatchGPUs(t *testing.T) {
	h100 := func(u string) GPU { return GPU{Name: "NVIDIA H100 80GB HBM3", UUID: u, ComputeCapability: "9.0"} }
	h200 := GPU{Name: "NVIDIA H200", UUID: "GPU-c", ComputeCapability: "9.0"}
	a100 := GPU{Name: "NVIDIA A100", UUID: "GPU-d", ComputeCapability: "8.0"}

	got, err := MatchGPUs([]GPU{h100("GPU-a"), h100("GPU-b")}, []GPU{h100("GPU-x"), h100("GPU-a")})
	want := []GPUPair{{Old: "GPU-a", New: "GPU-a"}, {Old: "GPU-b", New: "GPU-x"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("same UUID first: %v %v", got, err)
	}
	got, err = MatchGPUs([]GPU{h100("GPU-a")}, []GPU{a100, h200})
	if err != nil || got[0].New != "GPU-c" {
		t.Fatalf("same architecture: %v %v", got, err)
	}
	_, err = MatchGPUs([]GPU{h100("GPU-a")}, []GPU{a100})
	if !errors.Is(err, ErrNoMatchingGPU) {
		t.Fatalf("got %v, want ErrNoMatchingGPU", err)
	}
	mustContain(t, err, "1× NVIDIA H100 80GB HBM3 (sm_90)", "1× NVIDIA A100 (sm_80)")
}
