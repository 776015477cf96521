package fakecuda

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// Host is a fake GPU host: the CRYO_FAKE_GPUS text of n H100s, GPU i at
// /dev/nvidia<i>, and their UUIDs, for tests of multi-GPU behaviour.
type Host struct {
	GPUs  string // CRYO_FAKE_GPUS
	UUIDs []string
}

// NewHost returns a host of n GPUs whose UUIDs start with GPU-<prefix>-
// (eight hex digits), so that two hosts of a test have different GPUs.
// Another prefix panics: the fake driver would not parse such a UUID, and
// every restore would fail with CUDA_ERROR_INVALID_VALUE far from the cause.
func NewHost(n int, prefix string) Host {
	if _, err := hex.DecodeString(prefix); err != nil || len(prefix) != 8 {
		panic(fmt.Sprintf("fakecuda.NewHost: UUID prefix %q is not eight hex digits", prefix))
	}
	var h Host
	var specs []string
	for i := 0; i < n; i++ {
		u := fmt.Sprintf("GPU-%s-0000-4000-8000-%012d", prefix, i)
		h.UUIDs = append(h.UUIDs, u)
		specs = append(specs, fmt.Sprintf("NVIDIA H100 80GB HBM3|%s|85520809984|9.0||%d", u, i))
	}
	h.GPUs = strings.Join(specs, ";")
	return h
}
