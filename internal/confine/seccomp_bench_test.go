package confine

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// seccompLongFilter is an allow list of the default profile's
// unconditional x86_64 syscalls, as a linear filter of exactly n
// instructions: tests that never match come first, so every syscall runs
// through most of it.
func seccompLongFilter(tb testing.TB, spec *specs.LinuxSeccomp, n int) []byte {
	var allow []uint32
	for _, call := range spec.Syscalls {
		if call.Action != specs.ActAllow || len(call.Args) > 0 {
			continue
		}
		for _, name := range call.Names {
			if nr, ok := syscallX86_64[name]; ok {
				allow = append(allow, nr)
			}
		}
	}
	pad := (n - 8 - 2*len(allow)) / 2
	if pad < 0 || 8+2*pad+2*len(allow) != n {
		tb.Fatalf("cannot build %d instructions around %d syscalls", n, len(allow))
	}
	p := seccompProg{{code: seccompLdAbs, k: seccompOffNr}}
	pair := func(code uint16, k, ret uint32) {
		p = append(p, seccompInsn{code: code, k: k, jf: 1}, seccompInsn{code: seccompRetK, k: ret})
	}
	for i := range pad {
		pair(seccompJEQ, uint32(5000+i), seccompKillRet)
	}
	p = append(p, seccompInsn{code: seccompLdAbs, k: seccompOffArch},
		seccompInsn{code: seccompJEQ, k: unix.AUDIT_ARCH_X86_64, jt: 1},
		seccompInsn{code: seccompRetK, k: seccompKillRet},
		seccompInsn{code: seccompLdAbs, k: seccompOffNr})
	pair(seccompJSET, seccompX32Bit, seccompKillRet)
	for _, nr := range allow {
		pair(seccompJEQ, nr, seccompAllowRet)
	}
	p = append(p, seccompInsn{code: seccompRetK, k: seccompEPERMRet})
	return p.encode()
}

// A chain of three 1000-instruction filters against containerd's default
// profile: the whole check, every syscall of the three ABIs.
func BenchmarkCheckSeccomp(b *testing.B) {
	spec := seccompRuntimeDefault()
	f := seccompLongFilter(b, spec, 1000)
	chain := [][]byte{f, f, f}
	if err := CheckSeccomp(spec, chain); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := CheckSeccomp(spec, chain); err != nil {
			b.Fatal(err)
		}
	}
}
