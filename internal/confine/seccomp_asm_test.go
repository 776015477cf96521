package confine

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// seccompAsm assembles the classic BPF filters the tests play as images, with
// named jump targets ("" is the next instruction).
type seccompAsm struct {
	t      testing.TB
	p      seccompProg
	labels map[string]int
	jumps  map[int][2]string
}

func seccompNewAsm(t testing.TB) *seccompAsm {
	return &seccompAsm{t: t, labels: map[string]int{}, jumps: map[int][2]string{}}
}

// Offsets in struct seccomp_data.
const (
	seccompOffNr   = 0
	seccompOffArch = 4
	seccompOffIP   = 8
)

func seccompOffArg(i int, high bool) uint32 {
	if high {
		return uint32(16 + 8*i + 4)
	}
	return uint32(16 + 8*i)
}

const (
	seccompJEQ  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	seccompJGT  = unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K
	seccompJGE  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	seccompJSET = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K

	seccompAllowRet = unix.SECCOMP_RET_ALLOW
	seccompEPERMRet = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	seccompKillRet  = unix.SECCOMP_RET_KILL_THREAD
	seccompTrapRet  = unix.SECCOMP_RET_TRAP
)

func (a *seccompAsm) op(code uint16, k uint32) *seccompAsm {
	a.p = append(a.p, seccompInsn{code: code, k: k})
	return a
}

func (a *seccompAsm) ld(off uint32) *seccompAsm { return a.op(seccompLdAbs, off) }
func (a *seccompAsm) ret(k uint32) *seccompAsm  { return a.op(seccompRetK, k) }

func (a *seccompAsm) jmp(code uint16, k uint32, jt, jf string) *seccompAsm {
	a.jumps[len(a.p)] = [2]string{jt, jf}
	return a.op(code, k)
}

func (a *seccompAsm) label(name string) *seccompAsm {
	a.labels[name] = len(a.p)
	return a
}

// prog resolves the labels.
func (a *seccompAsm) prog() seccompProg {
	a.t.Helper()
	for at, j := range a.jumps {
		for side, name := range j {
			off := 0
			if name != "" {
				to, ok := a.labels[name]
				if !ok || to <= at || to-at-1 > 255 {
					a.t.Fatalf("bad jump from %d to %q", at, name)
				}
				off = to - at - 1
			}
			if side == 0 {
				a.p[at].jt = uint8(off)
			} else {
				a.p[at].jf = uint8(off)
			}
		}
	}
	return a.p
}

func (a *seccompAsm) bytes() []byte { return a.prog().encode() }

// seccompNr is a syscall's number on x86_64, failing the test for a name the
// table lacks.
func seccompNr(t testing.TB, name string) uint32 {
	t.Helper()
	n, ok := syscallX86_64[name]
	if !ok {
		t.Fatalf("no x86_64 syscall %q", name)
	}
	return n
}

// seccompDenyFilter is the filter a runtime builds for "allow everything on
// x86_64 but these syscalls, which get ERRNO(EPERM)", killing the other
// ABIs (libseccomp's bad-arch action for a spec listing only x86_64).
func seccompDenyFilter(t testing.TB, deny ...string) []byte {
	a := seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_X86_64, "", "kill").
		ld(seccompOffNr).jmp(seccompJSET, seccompX32Bit, "kill", "")
	for _, name := range deny {
		a.jmp(seccompJEQ, seccompNr(t, name), "deny", "")
	}
	return a.ret(seccompAllowRet).label("deny").ret(seccompEPERMRet).label("kill").ret(seccompKillRet).bytes()
}

// seccompAllowAll is a filter that lets everything through.
func seccompAllowAll(t testing.TB) []byte { return seccompNewAsm(t).ret(seccompAllowRet).bytes() }

// seccompDenySpec is the spec "allow everything but these syscalls (EPERM)", on
// x86_64 alone.
func seccompDenySpec(deny ...string) *specs.LinuxSeccomp {
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{specs.ArchX86_64},
		Syscalls:      []specs.LinuxSyscall{{Names: deny, Action: specs.ActErrno}},
	}
}
