package runtime

import (
	"errors"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/cudacr"
	"github.com/cryo-gpu/cryo/snapshot"
)

func TestApplyGPUMap(t *testing.T) {
	host := cudacr.Inventory{GPUs: []cudacr.GPU{
		{UUID: "GPU-a", Name: "NVIDIA H100", ComputeCapability: "9.0"},
		{UUID: "GPU-b", Name: "NVIDIA H100", ComputeCapability: "9.0"},
		{UUID: "GPU-c", Name: "NVIDIA A100", ComputeCapability: "8.0"},
	}}
	auto := []cudacr.GPUPair{{Old: "GPU-src", New: "GPU-a"}}
	cases := []struct {
		spec, want, err string
	}{
		{"", "GPU-a", ""},
		{"GPU-src=GPU-b", "GPU-b", ""},
		{"GPU-src=GPU-c", "", "needs a NVIDIA H100"},
		{"GPU-src=GPU-zz", "", "does not have"},
		{"GPU-other=GPU-b", "", "did not use"},
		{"nonsense", "", "want OLD-UUID=NEW-UUID"},
	}
	for _, c := range cases {
		pairs, err := ParseGPUMap(c.spec)
		var got []cudacr.GPUPair
		if err == nil {
			o := New(WithGPUMap(pairs))
			if pairs == nil {
				o.GPUMap = nil
			}
			got, err = o.applyGPUMap(auto, host)
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, snapshot.ErrIncompatibleHost) {
				t.Errorf("%q: error %v, want one containing %q", c.spec, err, c.err)
			}
			continue
		}
		if err != nil || len(got) != 1 || got[0].New != c.want {
			t.Errorf("%q: got %v, %v; want %s", c.spec, got, err, c.want)
		}
	}
}
