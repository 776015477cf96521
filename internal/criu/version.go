package criu

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/report"
	"golang.org/x/sys/unix"
)

// ErrTooOld: the CRIU found cannot checkpoint on this kernel.
var ErrTooOld = errors.New("CRIU too old for this kernel")

// Info is the CRIU cryo uses and the kernel it runs on.
type Info struct {
	Path string
	// Version is go-criu's form, for the version gates: 40201 for 4.2.1,
	// and 40300 for a build of 4.2.1 from git (go-criu counts a git build
	// as the next minor release, as runc does).
	Version int
	// Release is the version `criu --version` says, for people and the
	// manifest: "4.2.1" for that git build too. Empty when it could not be
	// read.
	Release string
	Kernel  string
}

// VersionString is the release CRIU reports itself as, else Version
// written out (40201 as "4.2.1").
func (i Info) VersionString() string {
	if i.Release != "" {
		return i.Release
	}
	return fmt.Sprintf("%d.%d.%d", i.Version/10000, i.Version/100%100, i.Version%100)
}

// release reads `criu --version` ("Version: 4.2.1"): the number go-criu
// gives a git build is one minor release ahead of it, which would name a
// CRIU that does not exist.
func release(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return ""
	}
	return parseRelease(string(out))
}

func parseRelease(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Probe asks the CRIU at path for its version over its RPC (go-criu),
// rather than parsing `criu --version`.
func Probe(path string) (Info, error) {
	info := Info{Kernel: KernelRelease()}
	c, err := newCRIU(path)
	if err != nil {
		return info, err
	}
	info.Path = path
	if info.Version, err = c.GetCriuVersion(); err != nil {
		return info, fmt.Errorf("ask %s for its version: %w", info.Path, err)
	}
	info.Release = release(path)
	return info, nil
}

// Check applies the kernel's rule: CRIU before 4.1 fails on Linux 6.13
// and later (vDSO); CRIU before 4.2 cannot dump a TCP or UDP socket on
// Linux 6.16 and later (the kernel restricted SO_PASSCRED, which 4.1 reads
// on every socket), and every CUDA process and network server has one.
func (i Info) Check() error {
	const installCRIU = "install CRIU 4.2.1 (`make deps`, contrib/install-deps.sh), or set CRYO_CRIU"
	switch {
	case i.Version < 40100 && KernelAtLeast(i.Kernel, 6, 13):
		return report.WithRemedy(fmt.Errorf("%w: CRIU %s (%s) fails on Linux %s (≥ 6.13: \"Unexpected rt vDSO area bounds\")", ErrTooOld, i.VersionString(), i.Path, i.Kernel), installCRIU)
	case i.Version < 40200 && KernelAtLeast(i.Kernel, 6, 16):
		return report.WithRemedy(fmt.Errorf("%w: CRIU %s (%s) cannot checkpoint TCP or UDP sockets on Linux %s (≥ 6.16 restricted a socket option it reads)", ErrTooOld, i.VersionString(), i.Path, i.Kernel), installCRIU)
	}
	return nil
}

// KernelAtLeast compares a kernel release ("6.18.44-…") with major.minor.
func KernelAtLeast(release string, major, minor int) bool {
	var kmaj, kmin int
	fmt.Sscanf(release, "%d.%d", &kmaj, &kmin)
	return kmaj > major || (kmaj == major && kmin >= minor)
}

// KernelRelease is this host's kernel release ("6.18.44-…"), or "".
func KernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
