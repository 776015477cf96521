package ctrd

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/report"
)

func i64(v int64) *int64 { return &v }

// gpuSpec is the spec `ctr run --device /dev/nvidia0 --device
// /dev/nvidiactl --device /dev/nvidia-uvm` writes: the nodes, and a rule
// allowing each after containerd's default deny.
func gpuSpec() *specs.Spec {
	return &specs.Spec{Linux: &specs.Linux{
		Devices: []specs.LinuxDevice{
			{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0},
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255},
			{Path: "/dev/nvidia-uvm", Type: "c", Major: 508, Minor: 0},
		},
		Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{
			{Allow: false, Access: "rwm"},
			{Allow: true, Type: "c", Major: i64(1), Minor: i64(3), Access: "rwm"},
			{Allow: true, Type: "c", Major: i64(195), Minor: i64(0), Access: "rwm"},
			{Allow: true, Type: "c", Major: i64(195), Minor: i64(255), Access: "rwm"},
			{Allow: true, Type: "c", Major: i64(508), Minor: i64(0), Access: "rwm"},
		}},
	}}
}

// TestReplaceGPUs: GPU 0's node and rule give way to GPU 1's; nvidiactl,
// nvidia-uvm, /dev/null and the default deny stay.
func TestReplaceGPUs(t *testing.T) {
	s := gpuSpec()
	ReplaceGPUs(s, []specs.LinuxDevice{{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1}})
	var paths []string
	for _, d := range s.Linux.Devices {
		paths = append(paths, d.Path)
	}
	if got := strings.Join(paths, " "); got != "/dev/nvidiactl /dev/nvidia-uvm /dev/nvidia1" {
		t.Errorf("devices: %s", got)
	}
	var rules []string
	for _, r := range s.Linux.Resources.Devices {
		if r.Major == nil {
			rules = append(rules, "deny")
			continue
		}
		rules = append(rules, fmtRule(r))
	}
	if got := strings.Join(rules, " "); got != "deny 1:3 195:255 508:0 195:1" {
		t.Errorf("rules: %s", got)
	}
}

func fmtRule(r specs.LinuxDeviceCgroup) string { return fmt.Sprintf("%d:%d", *r.Major, *r.Minor) }

var twoGPUs = cuda.Inventory{GPUs: []cuda.GPU{
	{Index: 0, Name: "NVIDIA H100", UUID: "GPU-aaaa0000-0000-4000-8000-000000000000", Minor: 0},
	{Index: 1, Name: "NVIDIA H100", UUID: "GPU-bbbb0000-0000-4000-8000-000000000001", Minor: 7},
}}

func TestPickGPU(t *testing.T) {
	for item, minor := range map[string]int{"1": 7, "0": 0, "GPU-bbbb": 7, "GPU-aaaa0000-0000-4000-8000-000000000000": 0} {
		g, err := pickGPU(item, twoGPUs.GPUs)
		if err != nil || g.Minor != minor {
			t.Errorf("pickGPU(%s) = minor %d, %v; want %d", item, g.Minor, err, minor)
		}
	}
}

// TestResolveUnknownGPU: an index the host lacks is refused with the
// host's GPUs and the remedy, before anything is created.
func TestResolveUnknownGPU(t *testing.T) {
	inv := func(context.Context) (cuda.Inventory, error) { return twoGPUs, nil }
	_, err := ResolveGPUs(context.Background(), []string{"2"}, inv)
	if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "1: NVIDIA H100 GPU-bbbb") || !strings.Contains(err.Error(), "nvidia-smi -L") {
		t.Fatalf("got %v, want ErrNoGPU listing the host's GPUs", err)
	}
	_, err = ResolveGPUs(context.Background(), []string{"/tmp/not-a-gpu"}, nil)
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("a path that names no GPU node: got %v, want ErrNoGPU", err)
	}
	_, err = ResolveGPUs(context.Background(), []string{"1"}, nil)
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("an index without an inventory: got %v, want ErrNoGPU", err)
	}
}

// TestResolveNodePath: a device node path keeps the host's device numbers
// and is named /dev/<name> in the container; the inventory is not read.
func TestResolveNodePath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nvidia3")
	if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Skipf("mknod needs root: %v", err)
	}
	nodes, err := ResolveGPUs(context.Background(), []string{p, p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].Path != "/dev/nvidia3" || nodes[0].Major != 1 || nodes[0].Minor != 3 {
		t.Fatalf("nodes: %+v, want one /dev/nvidia3 of 1:3", nodes)
	}
}

// A path that is no GPU's node is refused with its remedy as a value.
func TestHostNodeRemedy(t *testing.T) {
	_, err := hostNode(filepath.Join(t.TempDir(), "null"))
	var rm report.Remedied
	if !errors.Is(err, ErrNoGPU) || !errors.As(err, &rm) || rm.RemedyText() != "give a GPU index, a UUID or a /dev/nvidiaN path" {
		t.Fatalf("got %v (remedy %v)", err, rm)
	}
}
