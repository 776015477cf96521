package cuda

import (
	"errors"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

func TestUUID(t *testing.T) {
	const s = "GPU-0b1c2d3e-0000-4000-8000-00000000000a"
	u, err := ParseUUID(s)
	if err != nil || fakecuda.FormatUUID(u) != s || u[0] != 0x0b || u[15] != 0x0a {
		t.Fatalf("parse %q: %x %v", s, u, err)
	}
	if v, err := ParseUUID(s[4:]); err != nil || v != u {
		t.Fatalf("without prefix: %x %v", v, err)
	}
	for _, bad := range []string{"", "GPU-", "GPU-0b1c2d3e-0000-4000-8000-00000000000g", "MIG-0b1c2d3e-0000-4000-8000-000000000001", "GPU-0b1c2d3e00004000800000000000000a"} {
		if _, err := ParseUUID(bad); !errors.Is(err, ErrBadUUID) {
			t.Errorf("%q: got %v, want ErrBadUUID", bad, err)
		}
	}
}

func TestFormatCUDAVersion(t *testing.T) {
	for v, want := range map[int]string{13000: "13.0", 12080: "12.8", 12020: "12.2", 0: "unknown"} {
		if got := FormatCUDAVersion(v); got != want {
			t.Errorf("%d: %q, want %q", v, got, want)
		}
	}
}
