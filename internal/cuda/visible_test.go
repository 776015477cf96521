package cuda

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckVisible: a process that holds both GPUs' device files while its
// CUDA_VISIBLE_DEVICES selects one is refused (no restore would give it
// back); one that holds only the GPU it selects, or whose GPUs came from
// its environment, is not.
func TestCheckVisible(t *testing.T) {
	inv := Inventory{GPUs: []GPU{{UUID: "GPU-a", Minor: 0}, {UUID: "GPU-b", Minor: 1}}}
	two := []ProcessGPU{{UUID: "GPU-a"}, {UUID: "GPU-b"}}
	zero := VisibleDevices{Set: true, Value: "0"}
	// A pid with no /proc/PID/root: every GPU of the inventory is accessible.
	const gone = 1 << 30
	err := CheckVisible([]ProcessGPUs{{PID: gone, GPUs: two, VisibleDevices: zero, Evidence: EvidenceFiles}}, inv)
	if !errors.Is(err, ErrNoMatchingGPU) || !strings.Contains(err.Error(), "holds the device files of 2 GPUs, and its CUDA_VISIBLE_DEVICES=0 selects 1") || !strings.Contains(err.Error(), "nothing was suspended") {
		t.Fatalf("both nodes held, CUDA_VISIBLE_DEVICES=0: got %v", err)
	}
	mustRemedy(t, err, "run the process in a container given only the GPUs it uses (one device file each), or without CUDA_VISIBLE_DEVICES")
	if err := CheckVisible([]ProcessGPUs{{PID: gone, GPUs: two, VisibleDevices: zero, Evidence: EvidenceFiles}}, Inventory{}); err != nil {
		t.Errorf("without an inventory: refused: %v", err)
	}
	for _, p := range []ProcessGPUs{
		{PID: gone, GPUs: two[:1], VisibleDevices: zero, Evidence: EvidenceFiles},
		{PID: gone, GPUs: two, Evidence: EvidenceFiles},
		{PID: gone, GPUs: two[:1], VisibleDevices: zero, Evidence: EvidenceEnv},
		{PID: gone, GPUs: two, VisibleDevices: VisibleDevices{Set: true, Value: "0,1"}, Evidence: EvidenceFiles},
	} {
		if err := CheckVisible([]ProcessGPUs{p}, inv); err != nil {
			t.Errorf("%+v refused: %v", p, err)
		}
	}
}
