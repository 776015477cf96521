package confine

import (
	"errors"
	"testing"

	ctrdseccomp "github.com/containerd/containerd/v2/contrib/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// seccompRefused fails the test unless err is a *SeccompError wrapping
// ErrSeccompWeaker about syscall name on arch, and returns it.
func seccompRefused(t *testing.T, err error, name, arch string) *SeccompError {
	t.Helper()
	var se *SeccompError
	if !errors.Is(err, ErrSeccompWeaker) || !errors.As(err, &se) {
		t.Fatalf("got %v, want a *SeccompError wrapping ErrSeccompWeaker", err)
	}
	if se.Syscall != name || se.Arch != arch {
		t.Fatalf("seccompRefused %s on %s (%v), want %s on %s", se.Syscall, se.Arch, err, name, arch)
	}
	return se
}

func seccompAccepted(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("seccompRefused a chain as strict as the spec: %v", err)
	}
}

// A checkpoint of an unconfined container (no filter, or an allow-all
// one) restored under a spec that denies mount is seccompRefused, naming mount.
func TestSeccompAllowAllRefused(t *testing.T) {
	spec := seccompDenySpec("mount")
	for name, chain := range map[string][][]byte{"no filter": nil, "allow-all filter": {seccompAllowAll(t)}} {
		t.Run(name, func(t *testing.T) {
			se := seccompRefused(t, CheckSeccomp(spec, chain), "mount", "x86_64")
			if se.Image != "ALLOW" || se.Spec != "ERRNO(1)" || se.Number != seccompNr(t, "mount") {
				t.Errorf("error %+v: want mount's number, ALLOW against ERRNO(1)", se)
			}
			if se.Error() == "" {
				t.Error("empty message")
			}
		})
	}
}

// The spec's own semantics, written by hand as a filter, is seccompAccepted; so
// is a stricter one; a spec with no seccomp accepts anything.
func TestSeccompSameOrStricterAccepted(t *testing.T) {
	spec := seccompDenySpec("mount", "umount2")
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{seccompDenyFilter(t, "mount", "umount2")}))
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{seccompDenyFilter(t, "mount", "umount2", "chroot")}))
	seccompAccepted(t, CheckSeccomp(nil, nil))
	seccompAccepted(t, CheckSeccomp(nil, [][]byte{seccompAllowAll(t)}))
}

// The kernel takes the most restrictive result of all filters of a chain:
// two filters each weaker than the spec can together match it, and a
// stricter filter anywhere in the chain covers a weaker one.
func TestSeccompChainCombines(t *testing.T) {
	spec := seccompDenySpec("mount", "umount2")
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{seccompDenyFilter(t, "mount"), seccompDenyFilter(t, "umount2")}))
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{seccompAllowAll(t), seccompDenyFilter(t, "mount", "umount2", "chroot")}))
	seccompRefused(t, CheckSeccomp(spec, [][]byte{seccompDenyFilter(t, "mount"), seccompDenyFilter(t, "mount")}), "umount2", "x86_64")
}

// seccompPersonalitySpec allows personality(2) only for the persona 0, as
// containerd's default profile does, and denies everything else.
func seccompPersonalitySpec() *specs.LinuxSeccomp {
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActErrno,
		Architectures: []specs.Arch{specs.ArchX86_64},
		Syscalls: []specs.LinuxSyscall{{Names: []string{"personality"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: 0, Op: specs.OpEqualTo}}}},
	}
}

// An image whose filter allows personality for any persona is seccompRefused,
// with an argument that shows it; checking only the low half of the
// 64-bit argument is seccompRefused too; the exact test is seccompAccepted.
func TestSeccompArgumentConditions(t *testing.T) {
	spec, pers := seccompPersonalitySpec(), seccompNr(t, "personality")
	head := func() *seccompAsm {
		return seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_X86_64, "", "kill").
			ld(seccompOffNr).jmp(seccompJSET, seccompX32Bit, "kill", "").jmp(seccompJEQ, pers, "", "deny")
	}
	anyArg := head().ret(seccompAllowRet).label("deny").ret(seccompEPERMRet).label("kill").ret(seccompKillRet).bytes()
	se := seccompRefused(t, CheckSeccomp(spec, [][]byte{anyArg}), "personality", "x86_64")
	if se.Args[0] == 0 {
		t.Errorf("refusal shows persona 0, which the spec allows: %v", se)
	}
	lowOnly := head().ld(seccompOffArg(0, false)).jmp(seccompJEQ, 0, "", "deny").ret(seccompAllowRet).
		label("deny").ret(seccompEPERMRet).label("kill").ret(seccompKillRet).bytes()
	se = seccompRefused(t, CheckSeccomp(spec, [][]byte{lowOnly}), "personality", "x86_64")
	if se.Args[0]>>32 == 0 {
		t.Errorf("want a persona with high bits set, got %v", se)
	}
	exact := head().ld(seccompOffArg(0, true)).jmp(seccompJEQ, 0, "", "deny").ld(seccompOffArg(0, false)).jmp(seccompJEQ, 0, "", "deny").
		ret(seccompAllowRet).label("deny").ret(seccompEPERMRet).label("kill").ret(seccompKillRet).bytes()
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{exact}))
}

// An edited image can hide a backdoor behind an argument value no spec
// mentions: mount allowed when its fourth argument is a magic number, or
// a filter that returns an argument as its action. Both are found.
func TestSeccompArgumentBackdoor(t *testing.T) {
	spec := seccompDenySpec("mount")
	magic := seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_X86_64, "", "kill").
		ld(seccompOffNr).jmp(seccompJSET, seccompX32Bit, "kill", "").jmp(seccompJEQ, seccompNr(t, "mount"), "", "allow").
		ld(seccompOffArg(3, false)).jmp(seccompJEQ, 0x1337, "allow", "deny").
		label("allow").ret(seccompAllowRet).label("deny").ret(seccompEPERMRet).label("kill").ret(seccompKillRet).bytes()
	se := seccompRefused(t, CheckSeccomp(spec, [][]byte{magic}), "mount", "x86_64")
	if se.Args[3] != 0x1337 {
		t.Errorf("want the magic argument 0x1337 shown, got %v", se)
	}
	retArg := seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_X86_64, "", "kill").
		ld(seccompOffNr).jmp(seccompJSET, seccompX32Bit, "kill", "").jmp(seccompJEQ, seccompNr(t, "mount"), "", "allow").
		ld(seccompOffArg(0, false)).op(seccompRetA, 0).
		label("allow").ret(seccompAllowRet).label("kill").ret(seccompKillRet).bytes()
	se = seccompRefused(t, CheckSeccomp(spec, [][]byte{retArg}), "mount", "x86_64")
	if seccompLevelOf(uint32(se.Args[0])) <= seccompErrno {
		t.Errorf("want an argument that returns an action weaker than ERRNO, got %v", se)
	}
}

// A test the search cannot enumerate (arithmetic on an argument) is not
// taken on trust: alone it is seccompRefused as unverifiable; beside a filter
// that already enforces the spec, it is seccompAccepted.
func TestSeccompArithmeticOnArguments(t *testing.T) {
	spec := seccompDenySpec("mount")
	hidden := seccompNewAsm(t).ld(seccompOffNr).jmp(seccompJEQ, seccompNr(t, "mount"), "", "allow").
		ld(seccompOffArg(3, false)).op(unix.BPF_ALU|unix.BPF_XOR|unix.BPF_K, 0x1337).jmp(seccompJEQ, 0, "allow", "deny").
		label("allow").ret(seccompAllowRet).label("deny").ret(seccompEPERMRet).bytes()
	err := CheckSeccomp(spec, [][]byte{hidden, seccompDenyFilter(t)})
	var se *SeccompError
	if !errors.Is(err, ErrSeccompUnverifiable) || !errors.As(err, &se) || se.Syscall != "mount" {
		t.Fatalf("got %v, want mount seccompRefused as unverifiable", err)
	}
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{hidden, seccompDenyFilter(t, "mount")}))
}

// Only the ABIs the spec lists run at all: runc's filter kills the others.
// A filter that tests syscall numbers without the architecture lets x32
// and i386 through and is seccompRefused, naming the ABI; one that reproduces the
// spec on i386 (where mount is 21) is seccompAccepted.
func TestSeccompOtherABIs(t *testing.T) {
	spec := seccompDenySpec("mount")
	noArch := seccompNewAsm(t).ld(seccompOffNr).jmp(seccompJEQ, seccompNr(t, "mount"), "", "allow").ret(seccompEPERMRet).
		label("allow").ret(seccompAllowRet).bytes()
	seccompRefused(t, CheckSeccomp(spec, [][]byte{noArch}), "read", "x32")
	noI386 := seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_I386, "allow", "").
		ld(seccompOffNr).jmp(seccompJSET, seccompX32Bit, "kill", "").jmp(seccompJEQ, seccompNr(t, "mount"), "", "allow").ret(seccompEPERMRet).
		label("allow").ret(seccompAllowRet).label("kill").ret(seccompKillRet).bytes()
	seccompRefused(t, CheckSeccomp(spec, [][]byte{noI386}), "restart_syscall", "x86")

	spec.Architectures = []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	x32Mount := syscallX32["mount"] | seccompX32Bit
	abis := func(i386Mount uint32) []byte {
		return seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_I386, "i386", "").
			ld(seccompOffNr).jmp(seccompJEQ, seccompNr(t, "mount"), "deny", "").jmp(seccompJEQ, x32Mount, "deny", "allow").
			label("i386").ld(seccompOffNr).jmp(seccompJEQ, i386Mount, "deny", "allow").
			label("allow").ret(seccompAllowRet).label("deny").ret(seccompEPERMRet).bytes()
	}
	se := seccompRefused(t, CheckSeccomp(spec, [][]byte{abis(seccompNr(t, "mount"))}), "mount", "x86")
	if se.Number != syscallI386["mount"] {
		t.Errorf("i386 mount is %d, refusal says %d", syscallI386["mount"], se.Number)
	}
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{abis(syscallI386["mount"])}))
}

// On i386, libseccomp turns a rule on socket(2) into socket itself and
// socketcall(2) with SYS_SOCKET as first argument: an image allowing
// socketcall for every call is weaker than a spec allowing socket alone.
func TestSeccompI386Socketcall(t *testing.T) {
	spec := &specs.LinuxSeccomp{
		DefaultAction: specs.ActErrno,
		Architectures: []specs.Arch{specs.ArchX86_64, specs.ArchX86},
		Syscalls:      []specs.LinuxSyscall{{Names: []string{"socket"}, Action: specs.ActAllow}},
	}
	filter := func(checkCall bool) []byte {
		a := seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_I386, "i386", "").jmp(seccompJEQ, unix.AUDIT_ARCH_X86_64, "", "kill").
			ld(seccompOffNr).jmp(seccompJSET, seccompX32Bit, "kill", "").jmp(seccompJEQ, seccompNr(t, "socket"), "allow", "deny").
			label("i386").ld(seccompOffNr).jmp(seccompJEQ, syscallI386["socket"], "allow", "").
			jmp(seccompJEQ, syscallI386["socketcall"], "", "deny")
		if checkCall {
			a.ld(seccompOffArg(0, false)).jmp(seccompJEQ, syscallSocketcall["socket"], "allow", "deny")
		}
		return a.label("allow").ret(seccompAllowRet).label("deny").ret(seccompEPERMRet).label("kill").ret(seccompKillRet).bytes()
	}
	se := seccompRefused(t, CheckSeccomp(spec, [][]byte{filter(false)}), "socketcall", "x86")
	if uint32(se.Args[0]) == syscallSocketcall["socket"] {
		t.Errorf("refusal shows SYS_SOCKET, which the spec allows: %v", se)
	}
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{filter(true)}))
}

// runc turns several conditions on one argument into one rule each, so
// any of them allows the call; and where several rules match one call the
// most permissive counts.
func TestSeccompRuncRuleSemantics(t *testing.T) {
	pers := seccompNr(t, "personality")
	spec := seccompPersonalitySpec()
	spec.Syscalls[0].Args = append(spec.Syscalls[0].Args, specs.LinuxSeccompArg{Index: 0, Value: 8, Op: specs.OpEqualTo})
	spec.Syscalls = append(spec.Syscalls, specs.LinuxSyscall{Names: []string{"personality"}, Action: specs.ActTrap,
		Args: []specs.LinuxSeccompArg{{Index: 0, Value: 8, Op: specs.OpLessEqual}}})
	// 0 and 8: ALLOW (both rules match them; ALLOW wins); 1..7: TRAP;
	// other values: ERRNO.
	filter := func(middle uint32) []byte {
		return seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_X86_64, "", "kill").
			ld(seccompOffNr).jmp(seccompJSET, seccompX32Bit, "kill", "").jmp(seccompJEQ, pers, "", "deny").
			ld(seccompOffArg(0, true)).jmp(seccompJEQ, 0, "", "deny").
			ld(seccompOffArg(0, false)).jmp(seccompJEQ, 0, "allow", "").jmp(seccompJEQ, 8, "allow", "").jmp(seccompJGT, 8, "deny", "middle").
			label("allow").ret(seccompAllowRet).label("middle").ret(middle).label("deny").ret(seccompEPERMRet).label("kill").ret(seccompKillRet).bytes()
	}
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{filter(seccompTrapRet)}))
	se := seccompRefused(t, CheckSeccomp(spec, [][]byte{filter(seccompAllowRet)}), "personality", "x86_64")
	if se.Args[0] < 1 || se.Args[0] > 7 || se.Image != "ALLOW" || se.Spec != "TRAP" {
		t.Errorf("want a persona in 1..7 allowed against TRAP, got %v", se)
	}
}

// runc prepends a stub that returns ENOSYS for syscalls newer than the
// spec's rules when the default is not permissive: a filter with that stub
// is not weaker than a spec whose default kills.
func TestSeccompENOSYSStub(t *testing.T) {
	spec := &specs.LinuxSeccomp{
		DefaultAction: specs.ActKillProcess,
		Architectures: []specs.Arch{specs.ArchX86_64},
		Syscalls:      []specs.LinuxSyscall{{Names: []string{"read", "write", "exit_group"}, Action: specs.ActAllow}},
	}
	last := seccompNr(t, "exit_group")
	filter := func(stub uint32) []byte {
		return seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_X86_64, "", "kill").
			ld(seccompOffNr).jmp(seccompJSET, seccompX32Bit, "kill", "").jmp(seccompJGT, stub, "enosys", "").
			jmp(seccompJEQ, seccompNr(t, "read"), "allow", "").jmp(seccompJEQ, seccompNr(t, "write"), "allow", "").jmp(seccompJEQ, last, "allow", "kill").
			label("allow").ret(seccompAllowRet).label("enosys").ret(seccompRetENOSYS).
			label("kill").ret(unix.SECCOMP_RET_KILL_PROCESS).bytes()
	}
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{filter(last)}))
	// A stub that starts too low gives ENOSYS where the spec kills.
	se := seccompRefused(t, CheckSeccomp(spec, [][]byte{filter(100)}), "ptrace", "x86_64")
	if se.Number != 101 || se.Image != "ERRNO(38)" || se.Spec != "KILL_PROCESS" {
		t.Errorf("want syscall 101 seccompRefused, ENOSYS against KILL_PROCESS, got %v", se)
	}
}

// An action the kernel does not know kills the process: it is as strict
// as anything.
func TestSeccompUnknownActionIsKill(t *testing.T) {
	seccompAccepted(t, CheckSeccomp(seccompDenySpec("mount"), [][]byte{seccompNewAsm(t).ret(0x00010000).bytes()}))
}

// Strict mode (read, write, exit, sigreturn) is stricter than containerd's
// default profile, but not than a spec that kills read, or that lists
// only x86_64 (strict mode lets i386's read through).
func TestSeccompStrictMode(t *testing.T) {
	seccompAccepted(t, CheckSeccomp(seccompRuntimeDefault(), [][]byte{seccompStrict()}))
	seccompRefused(t, CheckSeccomp(seccompDenySpec("mount"), [][]byte{seccompStrict()}), "exit", "x86")
	seccompRefused(t, CheckSeccomp(&specs.LinuxSeccomp{DefaultAction: specs.ActAllow,
		Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActKillProcess}}},
		[][]byte{seccompStrict()}), "read", "x86_64")
}

// A spec runc would refuse is an error of its own.
func TestSeccompInvalidSpec(t *testing.T) {
	for name, spec := range map[string]*specs.LinuxSeccomp{
		"action":   {DefaultAction: "SCMP_ACT_MAYBE"},
		"operator": {DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"mount"}, Action: specs.ActErrno, Args: []specs.LinuxSeccompArg{{Op: "SCMP_CMP_ALMOST"}}}}},
		"index":    {DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"mount"}, Action: specs.ActErrno, Args: []specs.LinuxSeccompArg{{Index: 6, Op: specs.OpEqualTo}}}}},
		"arch":     {DefaultAction: specs.ActAllow, Architectures: []specs.Arch{"SCMP_ARCH_Z80"}},
	} {
		if err := CheckSeccomp(spec, nil); !errors.Is(err, ErrSeccompSpec) {
			t.Errorf("%s: got %v, want ErrSeccompSpec", name, err)
		}
	}
}

// seccompRuntimeDefault is containerd's default profile (RuntimeDefault in
// Kubernetes) for a container without capabilities.
func seccompRuntimeDefault() *specs.LinuxSeccomp {
	return ctrdseccomp.DefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
}

// libseccomp compares the arguments of x32 (a 32-bit ABI) on their low
// halves only, value included, though the kernel passes 64-bit registers:
// for a persona of 1<<32, a filter that tests both halves on x86_64 and
// the low half (zero) on x32 is exactly the spec's.
func TestSeccompX32ComparesLowHalves(t *testing.T) {
	spec := seccompPersonalitySpec()
	spec.Architectures = append(spec.Architectures, specs.ArchX32)
	spec.Syscalls[0].Args[0].Value = 1 << 32
	pers := seccompNr(t, "personality")
	filter := seccompNewAsm(t).ld(seccompOffArch).jmp(seccompJEQ, unix.AUDIT_ARCH_X86_64, "", "kill").
		ld(seccompOffNr).jmp(seccompJSET, seccompX32Bit, "x32", "").jmp(seccompJEQ, pers, "", "deny").
		ld(seccompOffArg(0, true)).jmp(seccompJEQ, 1, "low", "deny").
		label("x32").jmp(seccompJEQ, syscallX32["personality"]|seccompX32Bit, "low", "deny").
		label("low").ld(seccompOffArg(0, false)).jmp(seccompJEQ, 0, "", "deny").ret(seccompAllowRet).
		label("deny").ret(seccompEPERMRet).label("kill").ret(seccompKillRet).bytes()
	seccompAccepted(t, CheckSeccomp(spec, [][]byte{filter}))
}
