package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCheckXLA(t *testing.T) {
	twoGPUs := []ProcessGPU{{UUID: "GPU-a"}, {UUID: "GPU-b"}}
	cases := []struct {
		name   string
		p      ProcessGPUs
		refuse bool
	}{
		{"default allocator, two GPUs", ProcessGPUs{PID: 41, GPUs: twoGPUs, XLA: &XLAProcess{}}, true},
		{"bfc, two GPUs", ProcessGPUs{PID: 42, GPUs: twoGPUs, XLA: &XLAProcess{Allocator: "bfc"}}, true},
		{"cuda_async, two GPUs (unverified)", ProcessGPUs{PID: 43, GPUs: twoGPUs, XLA: &XLAProcess{Allocator: "cuda_async"}}, true},
		// The platform allocator fails about one restore in four on driver 580.
		{"platform allocator, two GPUs", ProcessGPUs{PID: 44, GPUs: twoGPUs, XLA: &XLAProcess{Allocator: "platform"}}, true},
		{"default allocator, one GPU", ProcessGPUs{PID: 45, GPUs: twoGPUs[:1], XLA: &XLAProcess{}}, false},
		{"not XLA, two GPUs", ProcessGPUs{PID: 46, GPUs: twoGPUs}, false},
		// The driver opens every GPU's node whatever CUDA_VISIBLE_DEVICES
		// says, and a checkpoint of such a process never restored (7 of 7
		// on 2x H100): every GPU it can open counts.
		{"default allocator, both nodes, memory on one", ProcessGPUs{PID: 47, GPUs: []ProcessGPU{{UUID: "GPU-a", Memory: 1 << 30}, {UUID: "GPU-b"}}, XLA: &XLAProcess{}}, true},
		{"default allocator, memory on both", ProcessGPUs{PID: 48, GPUs: []ProcessGPU{{UUID: "GPU-a", Memory: 1 << 30}, {UUID: "GPU-b", Memory: 1 << 30}}, XLA: &XLAProcess{}}, true},
		{"default allocator, both nodes, CUDA_VISIBLE_DEVICES=0", ProcessGPUs{PID: 49, GPUs: twoGPUs, VisibleDevices: VisibleDevices{Set: true, Value: "0"}, XLA: &XLAProcess{}}, true},
	}
	for _, c := range cases {
		err := CheckXLA([]ProcessGPUs{c.p}, Inventory{})
		if !c.refuse {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrXLAMultiGPU) {
			t.Fatalf("%s: got %v, want ErrXLAMultiGPU", c.name, err)
		}
		for _, want := range []string{"pid 4", "(2 GPUs, ", "nothing was suspended", "XLA_PYTHON_CLIENT_ALLOCATOR=platform", "checkpoint unusable"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", c.name, err, want)
			}
		}
		mustRemedy(t, err, "run each JAX process in a container given only its GPU (one GPU device per container; CUDA_VISIBLE_DEVICES alone is not enough); --allow-cuda-ipc suspends it anyway, at that risk")
	}
	err := CheckXLA([]ProcessGPUs{{PID: 49, GPUs: twoGPUs, VisibleDevices: VisibleDevices{Set: true, Value: "0"}, XLA: &XLAProcess{}}}, Inventory{})
	if want := "(2 GPUs, XLA's default allocator, CUDA_VISIBLE_DEVICES=0)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("JAX with CUDA_VISIBLE_DEVICES=0 holding both nodes: %v, want %q in it", err, want)
	}
	// After an in-place suspend and resume, JAX with CUDA_VISIBLE_DEVICES=0
	// held GPU 0's node alone, and no restore of it worked: the GPUs it can
	// open count. A pid with no /proc/PID/root can open every GPU.
	const gone = 1 << 30
	inv := Inventory{GPUs: []GPU{{UUID: "GPU-a", Minor: 0}, {UUID: "GPU-b", Minor: 1}}}
	err = CheckXLA([]ProcessGPUs{{PID: gone, GPUs: twoGPUs[:1], VisibleDevices: VisibleDevices{Set: true, Value: "0"}, XLA: &XLAProcess{}}}, inv)
	if want := "(2 GPUs, XLA's default allocator, CUDA_VISIBLE_DEVICES=0)"; !errors.Is(err, ErrXLAMultiGPU) || !strings.Contains(err.Error(), want) {
		t.Errorf("JAX holding one node of two it can open: %v, want %q in it", err, want)
	}
	if err := CheckXLA([]ProcessGPUs{{PID: gone, GPUs: twoGPUs[:1], XLA: &XLAProcess{}}}, Inventory{GPUs: inv.GPUs[:1]}); err != nil {
		t.Errorf("JAX on the one GPU of the host refused: %v", err)
	}
}

// TestCheckXLAOf: a real process that maps a file where JAX's CUDA plugin
// lives and holds two GPU nodes open (in a mount namespace of its own, so
// the host's /dev is untouched), as `cryo cuda suspend` finds a JAX
// process on two GPUs.
func TestCheckXLAOf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a mount namespace with GPU nodes)")
	}
	plugin := filepath.Join(t.TempDir(), "site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so")
	if err := os.MkdirAll(filepath.Dir(plugin), 0o755); err != nil {
		t.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plugin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// start runs the stand-in in a /dev of its own with the GPU nodes
	// nodes, holding the nodes gpus open.
	start := func(env string, nodes []string, gpus ...string) int {
		script := "mount -t tmpfs tmpfs /dev"
		for _, n := range nodes {
			script += " && mknod /dev/nvidia" + n + " c 1 3"
		}
		script += " && exec \"$0\" 60"
		for i, g := range gpus {
			script += " " + string(rune('3'+i)) + "</dev/nvidia" + g
		}
		cmd := exec.Command("unshare", "-m", "sh", "-c", script, plugin)
		cmd.Env = append(os.Environ(), env)
		if err := cmd.Start(); err != nil {
			t.Skipf("unshare: %v", err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := cmd.Process.Pid
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if m, _ := heldMinors(pid); len(m) == len(gpus) {
				if x, _ := xlaOf(pid, nil); x != nil {
					return pid
				}
			}
		}
		t.Fatalf("the stand-in process never mapped the plugin and held GPUs %v", gpus)
		return 0
	}
	both := []string{"0", "1"}
	two := start("XLA_PYTHON_CLIENT_ALLOCATOR=", both, "0", "1")
	err = CheckXLAOf([]int{two})
	if !errors.Is(err, ErrXLAMultiGPU) || !strings.Contains(err.Error(), "(2 GPUs, XLA's default allocator)") {
		t.Fatalf("JAX on two GPUs with the default allocator: got %v", err)
	}
	err = CheckXLAOf([]int{start("XLA_PYTHON_CLIENT_ALLOCATOR=platform", both, "0", "1")})
	if !errors.Is(err, ErrXLAMultiGPU) || !strings.Contains(err.Error(), "(2 GPUs, allocator platform)") {
		t.Fatalf("JAX on two GPUs with the platform allocator: got %v", err)
	}
	if err := CheckXLAOf([]int{start("XLA_PYTHON_CLIENT_ALLOCATOR=", both, "1")}); err != nil {
		t.Fatalf("JAX on one GPU refused: %v", err)
	}
	// The driver opens both nodes though CUDA_VISIBLE_DEVICES names one.
	if err := CheckXLAOf([]int{start("CUDA_VISIBLE_DEVICES=0", both, "0", "1")}); err != nil {
		t.Fatalf("JAX with CUDA_VISIBLE_DEVICES=0 holding both nodes refused: %v", err)
	}
	if err := CheckXLAOf([]int{os.Getpid()}); err != nil {
		t.Fatalf("a process without XLA refused: %v", err)
	}

	// The checkpoint's check, on what Describe finds: holding GPU 0's node
	// alone (as JAX with CUDA_VISIBLE_DEVICES=0 did after an in-place
	// suspend and resume) with both nodes in its /dev is refused; in a
	// /dev with GPU 0's node alone (a container given one GPU) it is not.
	inv := Inventory{GPUs: []GPU{{UUID: "GPU-a", Minor: 0}, {UUID: "GPU-b", Minor: 1}}}
	describe := func(pid int) []ProcessGPUs {
		p, err := inv.Describe(pid)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.GPUs) != 1 || p.Evidence != EvidenceFiles {
			t.Fatalf("pid %d described as %+v, want GPU 0's device file", pid, p)
		}
		return []ProcessGPUs{p}
	}
	err = CheckXLA(describe(start("CUDA_VISIBLE_DEVICES=0", both, "0")), inv)
	if !errors.Is(err, ErrXLAMultiGPU) || !strings.Contains(err.Error(), "(2 GPUs, XLA's default allocator, CUDA_VISIBLE_DEVICES=0)") {
		t.Fatalf("JAX holding GPU 0's node, with both nodes in its /dev: got %v", err)
	}
	if err := CheckXLA(describe(start("CUDA_VISIBLE_DEVICES=0", []string{"0"}, "0")), inv); err != nil {
		t.Fatalf("JAX in a /dev with GPU 0's node alone refused: %v", err)
	}
}
