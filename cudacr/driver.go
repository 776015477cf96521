package cudacr

import (
	"fmt"
	"os"
	"time"
)

// Environment variables that override the library paths.
const (
	EnvLibCUDA = "CRYO_LIBCUDA"
	EnvLibNVML = "CRYO_LIBNVML"
	// EnvCopyTimeout bounds the driver's GPU memory copies for every front
	// end (the shim and cryo-runc have no flag of their own): a hung driver
	// holds the workload frozen until it.
	EnvCopyTimeout = "CRYO_COPY_TIMEOUT"
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

// libPath is Options.LibPath, else $CRYO_LIBCUDA, else libcuda.so.1.
func (d *Driver) libPath() string {
	return firstSet(d.opts.LibPath, os.Getenv(EnvLibCUDA), defaultLibCUDA)
}

// nvmlPath is Options.NVMLPath, else $CRYO_LIBNVML, else empty (go-nvml's
// default, libnvidia-ml.so.1).
func (d *Driver) nvmlPath() string {
	return firstSet(d.opts.NVMLPath, os.Getenv(EnvLibNVML))
}

func (d *Driver) callTimeout() time.Duration {
	return positive(d.opts.CallTimeout, defaultCallTimeout)
}

func (d *Driver) copyTimeout() time.Duration {
	env, _ := CopyTimeoutFromEnv() // an invalid value is reported by `cryo doctor`
	return positive(d.opts.CopyTimeout, positive(env, defaultCopyTimeout))
}

// CopyTimeoutFromEnv is $CRYO_COPY_TIMEOUT (a Go duration such as 90s or
// 5m); zero when unset, and an error when it is not a positive duration.
func CopyTimeoutFromEnv() (time.Duration, error) {
	v := os.Getenv(EnvCopyTimeout)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q is not a positive duration, so the default %s applies; remedy: give one such as 90s or 5m", EnvCopyTimeout, v, defaultCopyTimeout)
	}
	return d, nil
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
