package cuda

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
)

func TestInventory(t *testing.T) {
	t.Setenv("CRYO_FAKE_GPUS", "NVIDIA H100 80GB HBM3|GPU-0b1c2d3e-0000-4000-8000-000000000001|85520809984|9.0|80000000000;"+
		"NVIDIA A100-SXM4-40GB|GPU-0b1c2d3e-0000-4000-8000-000000000002|42949672960|8.0|40000000000")
	t.Setenv("CRYO_FAKE_DRIVER_VERSION", "580.159.04")
	inv, err := newDriver().Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Inventory{DriverVersion: "580.159.04", CUDAVersion: 13000, GPUs: []GPU{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-0b1c2d3e-0000-4000-8000-000000000001", MemoryTotal: 85520809984, MemoryFree: 80000000000, ComputeCapability: "9.0"},
		{Index: 1, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-0b1c2d3e-0000-4000-8000-000000000002", MemoryTotal: 42949672960, MemoryFree: 40000000000, ComputeCapability: "8.0", Minor: 1},
	}}
	// The fake NVML lists every fake CUDA process of the host, as the real
	// one does: other tests' applications may run meanwhile. Their memory
	// is given back, so that the comparison holds whatever runs.
	for i := range inv.GPUs {
		for _, p := range inv.GPUs[i].Processes {
			inv.GPUs[i].MemoryFree += p.Memory
		}
		inv.GPUs[i].Processes = nil
	}
	if !reflect.DeepEqual(inv, want) {
		t.Fatalf("got %+v\nwant %+v", inv, want)
	}
}

func TestInventoryDefaultGPU(t *testing.T) {
	inv, err := newDriver().Inventory(context.Background())
	if err != nil || len(inv.GPUs) != 1 || inv.GPUs[0].ComputeCapability != "9.0" {
		t.Fatalf("got %+v, %v; want one fake H100", inv, err)
	}
}

func TestInventoryNoNVML(t *testing.T) {
	_, err := New(Options{NVMLPath: "/nonexistent/libnvidia-ml.so.1"}).Inventory(context.Background())
	if !errors.Is(err, ErrNVML) {
		t.Fatalf("got %v, want ErrNVML", err)
	}
	mustContain(t, err, "/nonexistent/libnvidia-ml.so.1", config.EnvLibNVML)
}
