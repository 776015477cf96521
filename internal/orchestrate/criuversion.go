package orchestrate

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrCRIUTooOld: the CRIU found cannot checkpoint on this kernel.
var ErrCRIUTooOld = errors.New("CRIU too old for this kernel")

// CRIUInfo is the CRIU cryo uses and the kernel it runs on.
type CRIUInfo struct {
	Path    string
	Version int // go-criu's form: 40201 for 4.2.1
	Kernel  string
}

// VersionString turns 40201 into "4.2.1".
func (i CRIUInfo) VersionString() string {
	return fmt.Sprintf("%d.%d.%d", i.Version/10000, i.Version/100%100, i.Version%100)
}

// ProbeCRIU asks CRIU for its version over its RPC (go-criu), rather than
// parsing `criu --version`.
func ProbeCRIU(configured string) (CRIUInfo, error) {
	info := CRIUInfo{Kernel: kernelRelease()}
	c, err := newCRIU(configured)
	if err != nil {
		return info, err
	}
	info.Path, _ = CRIUPath(configured)
	if info.Version, err = c.GetCriuVersion(); err != nil {
		return info, fmt.Errorf("ask %s for its version: %w", info.Path, err)
	}
	return info, nil
}

// Check applies the kernel's rule: CRIU before 4.1 fails on Linux 6.13
// and later (vDSO); CRIU before 4.2 cannot dump a TCP or UDP socket on
// Linux 6.16 and later (the kernel restricted SO_PASSCRED, which 4.1 reads
// on every socket), and every CUDA process and network server has one.
func (i CRIUInfo) Check() error {
	switch {
	case i.Version < 40100 && KernelAtLeast(i.Kernel, 6, 13):
		return fmt.Errorf("%w: CRIU %s (%s) fails on Linux %s (≥ 6.13: \"Unexpected rt vDSO area bounds\"); remedy: install CRIU 4.2.1 (`make deps`, contrib/install-deps.sh), or set CRYO_CRIU", ErrCRIUTooOld, i.VersionString(), i.Path, i.Kernel)
	case i.Version < 40200 && KernelAtLeast(i.Kernel, 6, 16):
		return fmt.Errorf("%w: CRIU %s (%s) cannot checkpoint TCP or UDP sockets on Linux %s (≥ 6.16 restricted a socket option it reads); remedy: install CRIU 4.2.1 (`make deps`, contrib/install-deps.sh), or set CRYO_CRIU", ErrCRIUTooOld, i.VersionString(), i.Path, i.Kernel)
	}
	return nil
}

// KernelAtLeast compares a kernel release ("6.18.44-…") with major.minor.
func KernelAtLeast(release string, major, minor int) bool {
	var kmaj, kmin int
	fmt.Sscanf(release, "%d.%d", &kmaj, &kmin)
	return kmaj > major || (kmaj == major && kmin >= minor)
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// checkCRIU refuses a checkpoint with a CRIU known to fail on this kernel,
// and returns its version for the manifest. A CRIU that cannot tell its
// version is left to fail on its own, with its log; its version is "".
func (o *Orchestrator) checkCRIU() (string, error) {
	info, err := ProbeCRIU(o.Config.CRIU)
	if err != nil {
		o.log().Debug("CRIU version unknown; not checked", "error", err)
		return "", nil
	}
	return info.VersionString(), info.Check()
}
