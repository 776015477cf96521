package status

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda"
)

func TestStateText(t *testing.T) {
	for _, c := range []struct {
		p    Process
		want string
	}{
		{Process{State: "running"}, "running"},
		{Process{PID: 7, State: "checkpointed", Stopped: true}, "stopped, CUDA checkpointed: run cryo recover 7"},
		{Process{PID: 7, State: "locked", Stopped: true, Operation: "checkpoint"}, "locked (stopped)"},
		{Process{State: StateFrozen, Frozen: true, Stopped: true}, "frozen (stopped)"},
		{Process{State: StateFrozen, Frozen: true, Stopped: true, Paused: true}, "frozen (stopped)"},
		{Process{PID: 8, State: "checkpointed", Stopped: true, Paused: true}, "stopped, CUDA checkpointed: run cryo recover 8"},
		{Process{State: StateBusy, TracerPID: 99}, "busy (traced by pid 99)"},
		{Process{State: StateUnknown, Detail: "driver did not answer"}, "unknown (driver did not answer)"},
	} {
		if got := StateText(c.p); got != c.want {
			t.Errorf("StateText(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}

func TestMemText(t *testing.T) {
	for b, want := range map[uint64]string{0: "-", 512: "512 B", 1 << 20: "1.0 MiB", 3 << 29: "1.5 GiB", 80 << 30: "80.0 GiB"} {
		if got := memText(b); got != want {
			t.Errorf("memText(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestContainerFromCgroup(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for data, want := range map[string]string{
		"0::/system.slice/docker-" + id + ".scope\n":                            id,
		"0::/kubepods/besteffort/pod1/cri-containerd-" + id + ".scope\n":        id,
		"6:freezer:/" + id + "\n0::/\n":                                         id,
		"0::/user.slice/user-0.slice/session-1.scope\n":                         "",
		"4:memory:/process_api/8e7479e381868826c5c14bd6802739bc\n6:freezer:/\n": "",
	} {
		if got := containerFromCgroup(data); got != want {
			t.Errorf("containerFromCgroup(%q) = %q, want %q", data, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	p := Process{PID: 1 << 30} // no such pid: no tracer to find
	if got, ok := classify(p, cuda.StateLocked, nil); !ok || got.State != "locked" {
		t.Fatalf("answer: %+v %v", got, ok)
	}
	if got, ok := classify(p, 0, fmt.Errorf("state: %w", cuda.ErrTimeout)); !ok || StateText(got) != "unknown (driver did not answer)" {
		t.Fatalf("timeout: %+v %v", got, ok)
	}
	if _, ok := classify(p, 0, fmt.Errorf("gone: %w", cuda.ErrNoProcess)); ok {
		t.Fatal("an exited process is kept")
	}
	if _, ok := classify(p, 0, &cuda.DriverError{Code: 3, Name: "CUDA_ERROR_NOT_INITIALIZED"}); ok {
		t.Fatal("a process without CUDA state is kept")
	}
	if got, ok := classify(p, 0, errors.New("helper died")); !ok || got.State != StateUnknown || got.Detail != "helper died" {
		t.Fatalf("other error: %+v %v", got, ok)
	}
}

func TestWriteTable(t *testing.T) {
	r := &Report{
		Processes: []Process{
			{PID: 10, State: "running", GPUs: []GPU{{Index: 0}, {Index: 1}}, GPUMemory: 2 << 20},
			{PID: 11, Container: "web", State: StateFrozen, Stopped: true, Paused: true, GPUs: []GPU{{Index: -1, UUID: "GPU-x"}}, GPUMemory: 1 << 20},
			{PID: 12, State: StateBusy, TracerPID: 13, Operation: "checkpoint", OperationPID: 14},
		},
		Locks:    []Lock{{File: "/run/cryo/locks/pid-12.lock", HolderPID: 14, Operation: "checkpoint", Target: "pid 12", Checkpoint: true}},
		Pauses:   []Pause{{Container: "old", File: "/r/paused-id-old.lock.json", Processes: []PauseProcess{{PID: 20}}}},
		Warnings: []string{"GPU inventory: NVML unavailable"},
	}
	var b strings.Builder
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `PID  CONTAINER  STATE                    GPUS   MEMORY   OPERATION
10   -          running                  0,1    2.0 MiB  -
11   web        frozen (stopped)         GPU-x  1.0 MiB  paused (GPU-free)
12   -          busy (traced by pid 13)  -      -        checkpoint (cryo pid 14)

LOCK HOLDER  OPERATION   TARGET  LOCK FILE
14           checkpoint  pid 12  /run/cryo/locks/pid-12.lock

PAUSED CONTAINER  PIDS GONE  RECORD
old               20         /r/paused-id-old.lock.json
`
	if b.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}
