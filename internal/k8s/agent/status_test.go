package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

func TestFailureOf(t *testing.T) {
	// The shim's report reaches the agent as text in the kubelet's answer:
	// its remedy must win over the agent's own.
	shim := errors.New("rpc error: checkpoint of abc failed at step criu-dump: CRIU failed; remedy: pass --tcp-established")
	err := stepErr("ns/pod/app", stepKubelet, &KubeletError{Status: 500, Body: shim.Error()}, "the agent's remedy")
	f := failureOf(err)
	if f.Step != stepKubelet || !strings.HasPrefix(f.Cause, "KubeletCheckpointFailed: ") || f.Remedy != "pass --tcp-established" {
		t.Errorf("failure %+v", f)
	}
	f = failureOf(stepErr("ns/pod/app", stepPush, errors.New("401 Unauthorized"), "check the Secret"))
	if f.Step != stepPush || f.Remedy != "check the Secret" || !strings.Contains(f.Cause, "401 Unauthorized") || reasonOf(f.Cause) != "PushFailed" {
		t.Errorf("failure %+v", f)
	}
	f = failureOf(fmt.Errorf("wrapped: %w", report.WithRemedy(errors.New("disk full"), "free space")))
	if f.Step != "checkpoint" || f.Remedy != "free space" || reasonOf(f.Cause) != "CheckpointFailed" {
		t.Errorf("failure %+v", f)
	}
}

func TestKubeletRemedy(t *testing.T) {
	for status, want := range map[int]string{404: "gone", 403: "nodes/checkpoint", 401: "nodes/checkpoint", 500: "runtimeClassName cryo"} {
		if got := kubeletRemedy(fmt.Errorf("x: %w", &KubeletError{Status: status})); !strings.Contains(got, want) {
			t.Errorf("%d: remedy %q lacks %q", status, got, want)
		}
	}
	if got := kubeletRemedy(errors.New("dial tcp: refused")); !strings.Contains(got, "--kubelet-ca") {
		t.Errorf("a connection failure's remedy: %q", got)
	}
}

func TestManifestFacts(t *testing.T) {
	sum := &ociimage.Summary{Driver: "580.159.04", CUDA: 13000, GPUs: []manifest.GPUNeed{
		{UUID: "GPU-a", Name: "NVIDIA H200", Memory: 8 << 30}, {UUID: "GPU-b", Name: "NVIDIA H200", Memory: 8 << 30},
		{UUID: "GPU-c", Name: "NVIDIA H100 80GB HBM3", Memory: 1 << 30}}}
	gpus := gpusOf(sum)
	if len(gpus) != 2 || gpus[0].Model != "NVIDIA-H200" || gpus[0].Count != 2 || gpus[0].MemoryMiB != 8192 ||
		gpus[1].Model != "NVIDIA-H100-80GB-HBM3" || gpus[1].Count != 1 {
		t.Errorf("gpus %+v", gpus)
	}
	if b := driverBranch(sum.Driver); b != "580" {
		t.Errorf("branch %q", b)
	}
	for v, want := range map[int]string{13000: "13.0", 12080: "12.8", 0: ""} {
		if got := cudaVersion(v); got != want {
			t.Errorf("cudaVersion(%d) = %q, want %q", v, got, want)
		}
	}
}

// TestInsertAfter: the shim's steps go right after the kubelet's call.
func TestInsertAfter(t *testing.T) {
	s := &statusWriter{}
	for _, step := range []string{stepSecret, stepKubelet, stepBuild} {
		_ = s.timed(step, func() error { return nil })
	}
	s.insertAfter(stepKubelet, []manifest.Step{{Name: "cuda-suspend", Seconds: 1.5}, {Name: "criu-dump", Seconds: 0.25}})
	var names []string
	for _, t := range s.timings {
		names = append(names, t.Step)
	}
	if got := strings.Join(names, " "); got != "secret kubelet-checkpoint shim/cuda-suspend shim/criu-dump build" {
		t.Errorf("steps %s", got)
	}
	if d := s.timings[2].Duration.Duration; d != 1500*time.Millisecond {
		t.Errorf("cuda-suspend took %s", d)
	}
}
