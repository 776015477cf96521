package cuda

import (
	"errors"
	"reflect"
	"testing"
)

const gib1 = 1 << 30

func h100(u string, free uint64) GPU {
	return GPU{Name: "NVIDIA H100 80GB HBM3", UUID: u, ComputeCapability: "9.0", MemoryTotal: 80 * gib1, MemoryFree: free}
}

func sees(key int, mem uint64, uuids ...string) Placement {
	p := Placement{Key: key}
	for _, u := range uuids {
		p.GPUs = append(p.GPUs, ProcessGPU{UUID: u, Name: "NVIDIA H100 80GB HBM3", ComputeCapability: "9.0", Memory: mem})
	}
	return p
}

func TestMatchKeepsOrMovesOneGPU(t *testing.T) {
	// A container that saw GPU-a, restored into a container given GPU-b.
	got, err := Match([]Placement{sees(1, 9*gib1, "GPU-a")}, []GPU{h100("GPU-b", 70*gib1)}, nil)
	if err != nil || !reflect.DeepEqual(got[1], []GPUPair{{"GPU-a", "GPU-b"}}) {
		t.Fatalf("move: %v %v", got, err)
	}
	// Same GPU given again: identity.
	got, err = Match([]Placement{sees(1, 9*gib1, "GPU-a")}, []GPU{h100("GPU-a", 70*gib1)}, nil)
	if err != nil || !reflect.DeepEqual(got[1], []GPUPair{{"GPU-a", "GPU-a"}}) {
		t.Fatalf("same: %v %v", got, err)
	}
}

func TestMatchTwoGPUsAndPartialMap(t *testing.T) {
	host := []GPU{h100("GPU-a", 70*gib1), h100("GPU-b", 70*gib1)}
	p := []Placement{sees(7, gib1, "GPU-a", "GPU-b")}
	got, err := Match(p, host, nil)
	if err != nil || !reflect.DeepEqual(got[7], []GPUPair{{"GPU-a", "GPU-a"}, {"GPU-b", "GPU-b"}}) {
		t.Fatalf("as it was: %v %v", got, err)
	}
	// One pair given, the other completed: a swap.
	got, err = Match(p, host, []GPUPair{{"GPU-a", "GPU-b"}})
	if err != nil || !reflect.DeepEqual(got[7], []GPUPair{{"GPU-a", "GPU-b"}, {"GPU-b", "GPU-a"}}) {
		t.Fatalf("swap: %v %v", got, err)
	}
	_, err = Match(p, host, []GPUPair{{"GPU-a", "GPU-x"}})
	mustContain(t, err, "GPU-x", "not among the GPUs")
	_, err = Match(p, host, []GPUPair{{"GPU-z", "GPU-a"}})
	mustContain(t, err, "GPU-z", "did not use")
}

func TestMatchRespectsVisibleDevices(t *testing.T) {
	host := []GPU{h100("GPU-a", 70*gib1), h100("GPU-b", 70*gib1)}
	p := sees(3, gib1, "GPU-a")
	p.VisibleDevices = VisibleDevices{Set: true, Value: "0"}
	got, err := Match([]Placement{p}, host, nil)
	if err != nil || !reflect.DeepEqual(got[3], []GPUPair{{"GPU-a", "GPU-a"}}) {
		t.Fatalf("CUDA_VISIBLE_DEVICES=0: %v %v", got, err)
	}
	_, err = Match([]Placement{p}, host, []GPUPair{{"GPU-a", "GPU-b"}})
	if !errors.Is(err, ErrNoMatchingGPU) {
		t.Fatalf("a map against CUDA_VISIBLE_DEVICES: %v", err)
	}
	mustContain(t, err, "will not see")
	// A process that saw one GPU, in a container that would give it two.
	_, err = Match([]Placement{sees(4, gib1, "GPU-a")}, host, nil)
	mustContain(t, err, "exactly 1 GPU(s)", "2× NVIDIA H100")
	mustRemedy(t, err, "give the restored container exactly 1 GPU(s) of that model")
}

func TestMatchRefusesModelAndMemory(t *testing.T) {
	a100 := GPU{Name: "NVIDIA A100", UUID: "GPU-d", ComputeCapability: "8.0", MemoryFree: 40 * gib1}
	_, err := Match([]Placement{sees(1, gib1, "GPU-a")}, []GPU{a100}, nil)
	if !errors.Is(err, ErrNoMatchingGPU) {
		t.Fatalf("got %v, want ErrNoMatchingGPU", err)
	}
	mustContain(t, err, "1× NVIDIA H100 80GB HBM3 (sm_90)", "NVIDIA A100", "sm_80")
	_, err = Match([]Placement{sees(1, 20*gib1, "GPU-a")}, []GPU{h100("GPU-b", 10*gib1)}, nil)
	mustContain(t, err, "20.0 GiB", "10.0 GiB free")
	// A two-GPU process whose big GPU is now full elsewhere: swapped.
	p := sees(1, 0, "GPU-a", "GPU-b")
	p.GPUs[0].Memory, p.GPUs[1].Memory = 20*gib1, gib1
	got, err := Match([]Placement{p}, []GPU{h100("GPU-a", 10*gib1), h100("GPU-b", 30*gib1)}, nil)
	if err != nil || got[1][0].New != "GPU-b" || got[1][1].New != "GPU-a" {
		t.Fatalf("free GPU: %v %v", got, err)
	}
}

func TestMatchSeveralProcesses(t *testing.T) {
	// Two ranks, one GPU each by CUDA_VISIBLE_DEVICES, moved to other GPUs.
	r0, r1 := sees(10, gib1, "GPU-a"), sees(11, gib1, "GPU-b")
	r0.VisibleDevices = VisibleDevices{Set: true, Value: "0"}
	r1.VisibleDevices = VisibleDevices{Set: true, Value: "1"}
	got, err := Match([]Placement{r0, r1}, []GPU{h100("GPU-c", 70*gib1), h100("GPU-d", 70*gib1)}, nil)
	if err != nil || got[10][0].New != "GPU-c" || got[11][0].New != "GPU-d" {
		t.Fatalf("ranks: %v %v", got, err)
	}
}

func TestVisibleDevicesSelect(t *testing.T) {
	gs := []GPU{{UUID: "GPU-aaaa-1"}, {UUID: "GPU-bbbb-2"}, {UUID: "GPU-cccc-3"}}
	for _, c := range []struct {
		v    VisibleDevices
		want []string
	}{
		{VisibleDevices{}, []string{"GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"}},
		{VisibleDevices{true, "2,0"}, []string{"GPU-cccc-3", "GPU-aaaa-1"}},
		{VisibleDevices{true, "GPU-bbbb"}, []string{"GPU-bbbb-2"}},
		{VisibleDevices{true, "1,7,0"}, []string{"GPU-bbbb-2"}},
		{VisibleDevices{true, ""}, nil},
		{VisibleDevices{true, "0,0"}, []string{"GPU-aaaa-1"}},
	} {
		got, err := c.v.Select(gs)
		var u []string
		for _, g := range got {
			u = append(u, g.UUID)
		}
		if err != nil || !reflect.DeepEqual(u, c.want) {
			t.Errorf("%v: got %v %v, want %v", c.v, u, err, c.want)
		}
	}
	if _, err := (VisibleDevices{true, "MIG-1234"}).Select(gs); !errors.Is(err, ErrUnsupportedGPU) {
		t.Errorf("MIG: %v", err)
	}
}

func TestCheckIPC(t *testing.T) {
	rank := func(pid int, comm, safe bool) ProcessGPUs {
		return ProcessGPUs{PID: pid, NCCL: &NCCLRank{Communicator: comm, SocketsOnly: safe}}
	}
	if err := CheckIPC([]ProcessGPUs{{PID: 1}, rank(2, false, false)}); err != nil {
		t.Fatalf("one process that only links NCCL: %v", err)
	}
	err := CheckIPC([]ProcessGPUs{rank(1, true, false), rank(2, true, false)})
	if !errors.Is(err, ErrCUDAIPC) {
		t.Fatalf("two ranks: %v", err)
	}
	mustContain(t, err, "pid 1, 2", NCCLSafeEnv)
	if err := CheckIPC([]ProcessGPUs{rank(1, true, true), rank(2, true, true)}); err != nil {
		t.Fatalf("sockets only: %v", err)
	}
	if err := CheckIPC([]ProcessGPUs{rank(1, false, false), rank(2, false, false)}); err == nil {
		t.Fatal("two NCCL-linked processes without communicator threads must be refused")
	}
}
