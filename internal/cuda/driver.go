package cuda

import (
	"time"
)

const (
	defaultLibCUDA     = "libcuda.so.1"
	defaultLibNVML     = "libnvidia-ml.so.1"
	defaultCallTimeout = 30 * time.Second
	defaultCopyTimeout = 10 * time.Minute
	defaultLockTimeout = 10 * time.Second
)

// Driver runs every call of the CUDA checkpoint API in a helper child
// process that is killed at a deadline: the real driver has hung past its
// own timeout (on a frozen process), and a caller such as the shim must
// never hang with it. A Driver holds no library handle and is safe for
// concurrent use. Calls for different processes may overlap, each in its
// own helper (Suspend and Resume run each phase so); calls for one process
// must not, and a set operation never issues them so.
type Driver struct{ opts Options }

// New returns a Driver; it loads nothing until a call is made.
func New(opts Options) *Driver { return &Driver{opts: opts} }

// libPath is Options.LibPath, else libcuda.so.1.
func (d *Driver) libPath() string { return firstSet(d.opts.LibPath, defaultLibCUDA) }

// nvmlPath is Options.NVMLPath, else empty (go-nvml's default,
// libnvidia-ml.so.1).
func (d *Driver) nvmlPath() string { return d.opts.NVMLPath }

func (d *Driver) callTimeout() time.Duration {
	return positive(d.opts.CallTimeout, defaultCallTimeout)
}

func (d *Driver) copyTimeout() time.Duration {
	return positive(d.opts.CopyTimeout, defaultCopyTimeout)
}

func firstSet(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func positive(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
