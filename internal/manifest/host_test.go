package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/report"
)

const gb = 1 << 30

func h100(uuid string, free uint64) cuda.GPU {
	return cuda.GPU{Name: "NVIDIA H100 80GB HBM3", UUID: uuid, ComputeCapability: "9.0", MemoryTotal: 80 * gb, MemoryFree: free}
}

// legacyNeeds derives the needs from the source inventory the way
// manifests before version 3 did: every GPU of the host, with all the
// memory in use on it.
func legacyNeeds(inv cuda.Inventory) []GPUNeed {
	var needs []GPUNeed
	for _, g := range inv.GPUs {
		used := uint64(0)
		if g.MemoryTotal > g.MemoryFree {
			used = g.MemoryTotal - g.MemoryFree
		}
		needs = append(needs, GPUNeed{UUID: g.UUID, Name: g.Name, ComputeCapability: g.ComputeCapability, Memory: used})
	}
	return needs
}

func gpuManifest() *Manifest {
	m := New("c")
	m.Processes = []Process{{PID: 1}}
	m.Inventory = cuda.Inventory{DriverVersion: "580.159.04", CUDAVersion: 13000,
		GPUs: []cuda.GPU{h100("GPU-old", 80*gb-92*gb/10)}}
	m.Needs = legacyNeeds(m.Inventory)
	return m
}

func TestCheckHostPairs(t *testing.T) {
	host := cuda.Inventory{DriverVersion: "580.159.04", GPUs: []cuda.GPU{h100("GPU-a", 10*gb), h100("GPU-new", 70*gb)}}
	pairs, err := CheckHost(gpuManifest(), host, host.GPUs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := pairs[AnyProcess]; len(p) != 1 || p[0].Old != "GPU-old" || p[0].New != "GPU-a" {
		t.Fatalf("pairs %v", pairs)
	}
	host.GPUs = append(host.GPUs, h100("GPU-old", 70*gb))
	pairs, _ = CheckHost(gpuManifest(), host, host.GPUs, nil)
	if pairs != nil {
		t.Fatalf("an old manifest on its own host restores without pairs: %v", pairs)
	}
}

func TestCheckHostRefuses(t *testing.T) {
	a100 := cuda.GPU{Name: "NVIDIA A100", UUID: "GPU-x", ComputeCapability: "8.0", MemoryTotal: 40 * gb, MemoryFree: 40 * gb}
	cases := []struct {
		name string
		host cuda.Inventory
		want string
	}{
		{"model", cuda.Inventory{DriverVersion: "580.159.04", GPUs: []cuda.GPU{a100}},
			"restore needs 1× NVIDIA H100 80GB HBM3 (sm_90) with ≥ 9.2 GiB free; this host offers 1× NVIDIA A100 (sm_80)"},
		{"memory", cuda.Inventory{DriverVersion: "580.159.04", GPUs: []cuda.GPU{h100("GPU-b", 3*gb)}},
			"restore needs 9.2 GiB on GPU-b (for what ran on GPU-old); it has 3.0 GiB free"},
		{"none", cuda.Inventory{DriverVersion: "580.159.04"},
			"restore needs 1× NVIDIA H100 80GB HBM3 (sm_90) with ≥ 9.2 GiB free; this host offers no GPU"},
		{"driver", cuda.Inventory{DriverVersion: "570.86.15", CUDAVersion: 12080, GPUs: []cuda.GPU{h100("GPU-b", 70*gb)}},
			"restore needs NVIDIA driver ≥ 580.159.04 (CUDA 13.0); this host has driver 570.86.15 (CUDA 12.8); remedy: upgrade the driver or restore on another host"},
	}
	for _, c := range cases {
		_, err := CheckHost(gpuManifest(), c.host, c.host.GPUs, nil)
		if !errors.Is(err, ErrIncompatibleHost) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v\nwant %s", c.name, err, c.want)
		}
	}
	remedies := map[string]string{"driver": "upgrade the driver or restore on another host", "memory": "free GPU memory there, or map it elsewhere"}
	for _, c := range cases {
		_, err := CheckHost(gpuManifest(), c.host, c.host.GPUs, nil)
		var rm report.Remedied
		if want, ok := remedies[c.name]; ok && (!errors.As(err, &rm) || rm.RemedyText() != want) {
			t.Errorf("%s: the remedy is not the value %q: %v", c.name, want, rm)
		}
	}
}

func TestCheckHostFewerGPUs(t *testing.T) {
	m := gpuManifest()
	m.Inventory.GPUs = append(m.Inventory.GPUs, h100("GPU-old2", 70*gb))
	m.Needs = legacyNeeds(m.Inventory)
	host := cuda.Inventory{DriverVersion: "580.159.04", GPUs: []cuda.GPU{h100("GPU-a", 79*gb)}}
	_, err := CheckHost(m, host, host.GPUs, nil)
	want := "restore needs 1× NVIDIA H100 80GB HBM3 (sm_90) with ≥ 10.0 GiB free; this host offers 1× NVIDIA H100 80GB HBM3 (sm_90)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

func TestCheckHostNoCUDA(t *testing.T) {
	if pairs, err := CheckHost(New("c"), cuda.Inventory{}, nil, nil); pairs != nil || err != nil {
		t.Fatalf("CPU checkpoint must fit any host: %v %v", pairs, err)
	}
}

// v3Manifest is a version 3 manifest: one process that saw GPU-old (of a
// 2-GPU host whose other GPU ran someone else's 60 GiB) and held 9.2 GiB.
func v3Manifest() *Manifest {
	m := gpuManifest()
	m.Inventory.GPUs = append(m.Inventory.GPUs, h100("GPU-other", 20*gb))
	m.Processes = []Process{{PID: 40, NSPID: 1, GPUs: []cuda.ProcessGPU{
		{UUID: "GPU-old", Name: "NVIDIA H100 80GB HBM3", ComputeCapability: "9.0", Memory: 92 * gb / 10}}}}
	m.Needs = NeedsFromProcesses(m.Processes)
	return m
}

func TestCheckHostPerProcess(t *testing.T) {
	m := v3Manifest()
	if len(m.Needs) != 1 || m.Needs[0].Memory != 92*gb/10 {
		t.Fatalf("needs count only the process: %+v", m.Needs)
	}
	// A 1-GPU host takes a checkpoint of one GPU of a 2-GPU host.
	host := cuda.Inventory{DriverVersion: "580.159.04", GPUs: []cuda.GPU{h100("GPU-new", 70*gb)}}
	pairs, err := CheckHost(m, host, host.GPUs, nil)
	if err != nil || len(pairs[1]) != 1 || pairs[1][0].New != "GPU-new" {
		t.Fatalf("1-GPU host: %v %v", pairs, err)
	}
	// A container given two GPUs cannot take a process that saw one.
	host.GPUs = append(host.GPUs, h100("GPU-old", 70*gb))
	_, err = CheckHost(m, host, host.GPUs, nil)
	if !errors.Is(err, ErrIncompatibleHost) || !errors.Is(err, cuda.ErrNoMatchingGPU) {
		t.Fatalf("two targets for one GPU: %v", err)
	}
	pairs, err = CheckHost(m, host, host.GPUs[1:], nil)
	if err != nil || pairs[1][0].New != "GPU-old" {
		t.Fatalf("same GPU: %v %v", pairs, err)
	}
	p, ok := m.PairsFor(1)
	if ok || p != nil {
		t.Fatalf("PairsFor before a check: %v", p)
	}
}

func TestCompareVersions(t *testing.T) {
	if compareVersions("580.159.04", "580.65.06") <= 0 || compareVersions("570.1", "580") >= 0 || compareVersions("580.0", "580") != 0 {
		t.Fatal("compareVersions")
	}
}
