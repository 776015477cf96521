package confine

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// CRIU restores each thread's seccomp filter chain from its images, and
// runc does not apply the spec's filter over it. CheckSeccomp compares the
// chain an image would restore with the filter runc would install for the
// spec, syscall by syscall, on every x86 ABI the kernel lets a process
// use: x86_64, x32 and i386.

var (
	// ErrSeccompWeaker marks a filter chain that lets some syscall do more
	// than the spec's filter does.
	ErrSeccompWeaker = errors.New("the checkpoint's seccomp filters are weaker than the spec's")
	// ErrSeccompMalformed marks a filter chain the kernel would not load,
	// or seccomp images CRIU could not restore.
	ErrSeccompMalformed = errors.New("the checkpoint's seccomp filters are malformed")
	// ErrSeccompUnverifiable marks a filter chain whose decisions depend on
	// syscall arguments in ways the check cannot enumerate (arithmetic on
	// arguments, or too many argument cases), where the filters it can
	// enumerate do not already enforce the spec.
	ErrSeccompUnverifiable = errors.New("the checkpoint's seccomp filters cannot be shown to be as strict as the spec's")
	// ErrSeccompSpec marks a spec filter runc would not install.
	ErrSeccompSpec = errors.New("the spec's seccomp filter is invalid")
)

// SeccompError is a syscall that the image's filter chain lets through
// more than the spec's filter does.
type SeccompError struct {
	Syscall string    // the syscall's name, or "syscall <n>" when it has none
	Number  uint32    // its number as the filter sees it (with the x32 bit on x32)
	Arch    string    // x86_64, x32 or x86 (i386)
	Image   string    // the chain's action, e.g. ALLOW
	Spec    string    // the spec's action, e.g. ERRNO(1)
	Args    [6]uint64 // the arguments that showed it
	IP      uint64    // the instruction pointer that showed it
	Unsure  bool      // the chain is not shown weaker, only not shown as strict
}

func (e *SeccompError) Error() string {
	var b strings.Builder
	if e.Unsure {
		fmt.Fprintf(&b, "seccomp: %s (%s syscall %d): the checkpoint's filters decide on its arguments in a way that cannot be checked, and the spec's filter gives %s", e.Syscall, e.Arch, e.Number, e.Spec)
		return b.String()
	}
	fmt.Fprintf(&b, "seccomp: %s (%s syscall %d) gets %s from the checkpoint's filters but %s from the spec's", e.Syscall, e.Arch, e.Number, e.Image, e.Spec)
	if e.Args != [6]uint64{} {
		fmt.Fprintf(&b, ", with arguments %#x", e.Args)
	}
	if e.IP != 0 {
		fmt.Fprintf(&b, " at instruction pointer %#x", e.IP)
	}
	return b.String()
}

func (e *SeccompError) Unwrap() error {
	if e.Unsure {
		return ErrSeccompUnverifiable
	}
	return ErrSeccompWeaker
}

// CheckSeccomp reports whether a task's seccomp filter chain is at least as
// strict as the spec's seccomp on every syscall. chain is the list of classic
// BPF programs the kernel runs for that task (each []byte is the raw
// struct sock_filter array, 8 bytes per instruction, little-endian, as CRIU's
// seccomp.img stores them in seccomp_filter.filter); an empty chain means no
// filter (seccomp mode disabled). spec nil means the spec sets no filter:
// anything passes. The error, on refusal, is a *SeccompError that wraps
// ErrSeccompWeaker and names the syscall, the architecture, the image's
// action and the spec's action.
//
// Other refusals: a program the kernel would reject wraps
// ErrSeccompMalformed, a spec runc would reject wraps ErrSeccompSpec, and a
// chain whose argument checks cannot be enumerated is a *SeccompError that
// wraps ErrSeccompUnverifiable.
func CheckSeccomp(spec *specs.LinuxSeccomp, chain [][]byte) error {
	if spec == nil {
		return nil
	}
	if runtime.GOARCH != "amd64" {
		// Another architecture's filters would meet only the x86 ABIs here,
		// fall to their "bad arch" action and pass unchecked.
		return fmt.Errorf("%w: cryo compares seccomp filters on x86-64 hosts only, this one is %s", ErrSeccompUnverifiable, runtime.GOARCH)
	}
	want, err := seccompCompileSpec(spec)
	if err != nil {
		return err
	}
	progs := make([]seccompProg, len(chain))
	for i, raw := range chain {
		if progs[i], err = seccompDecode(raw); err != nil {
			return fmt.Errorf("%w: filter %d of %d: %w", ErrSeccompMalformed, i+1, len(chain), err)
		}
	}
	c := newSeccompChecker(want, progs)
	for abi := range seccompABIs {
		for nr := uint32(0); nr < seccompNrLimit; nr++ {
			if err := c.syscall(abi, nr); err != nil {
				return err
			}
		}
	}
	return nil
}
