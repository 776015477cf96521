package confine

import (
	"fmt"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// seccompSpec is the spec's filter as runc installs it with libseccomp:
// what each syscall of each ABI gets, for given arguments.
type seccompSpec struct {
	def  uint32 // defaultAction with defaultErrnoRet
	abis [len(seccompABIs)]seccompSpecABI
}

type seccompSpecABI struct {
	listed bool                              // the filter holds the ABI; else libseccomp's "bad arch" action
	rules  [seccompNrLimit][]seccompSpecRule // by number, without the x32 bit
	// stubAbove is the highest number the spec's rules name on this ABI:
	// runc prepends a stub returning ENOSYS above it, so that a syscall
	// newer than the profile fails as unknown. 0: no stub.
	stubAbove uint32
}

// seccompSpecRule is one libseccomp rule: its action when all its
// conditions hold.
type seccompSpecRule struct {
	ret   uint32
	conds []seccompCond
}

// seccompCond is one argument condition, as libseccomp compares it.
type seccompCond struct {
	arg    uint
	op     specs.LinuxSeccompOperator
	v, v2  uint64
	narrow bool // a 32-bit ABI: libseccomp compares the low halves only
}

// seccompBadArch is libseccomp's default action for an ABI the filter does
// not list (SCMP_ACT_KILL), which runc keeps.
const seccompBadArch = unix.SECCOMP_RET_KILL_THREAD

// seccompCompileSpec builds the filter runc would install for spec, with
// runc's and libseccomp's rules: runc skips a rule whose action is the
// default and a syscall name libseccomp does not know, and splits a rule
// with several conditions on one argument into one rule per condition;
// libseccomp resolves names on each ABI (skipping those the ABI lacks), and
// on i386 turns a socket or SysV IPC syscall into both its own number and
// socketcall(2)/ipc(2) with the call number as first argument.
func seccompCompileSpec(spec *specs.LinuxSeccomp) (*seccompSpec, error) {
	def, err := seccompSpecAction(spec.DefaultAction, spec.DefaultErrnoRet)
	if err != nil {
		return nil, fmt.Errorf("%w: defaultAction: %w", ErrSeccompSpec, err)
	}
	s := &seccompSpec{def: def}
	if err := s.listArchs(spec.Architectures); err != nil {
		return nil, err
	}
	for i, call := range spec.Syscalls {
		if err := s.addCall(call); err != nil {
			return nil, fmt.Errorf("%w: syscalls[%d] %v: %w", ErrSeccompSpec, i, call.Names, err)
		}
	}
	if !seccompAllowsNew(spec.DefaultAction) {
		s.setStubs(spec.Syscalls)
	}
	return s, nil
}

// seccompForeignArchs are the spec architectures runc accepts that an
// x86-64 kernel never reports: listing them changes nothing here.
var seccompForeignArchs = []specs.Arch{
	specs.ArchARM, specs.ArchAARCH64, specs.ArchMIPS, specs.ArchMIPS64, specs.ArchMIPS64N32,
	specs.ArchMIPSEL, specs.ArchMIPSEL64, specs.ArchMIPSEL64N32, specs.ArchPPC, specs.ArchPPC64,
	specs.ArchPPC64LE, specs.ArchS390, specs.ArchS390X, specs.ArchPARISC, specs.ArchPARISC64,
	specs.ArchRISCV64, specs.ArchLOONGARCH64,
}

func (s *seccompSpec) listArchs(archs []specs.Arch) error {
	for i, abi := range seccompABIs {
		s.abis[i].listed = abi.native || slices.Contains(archs, abi.arch)
	}
	for _, a := range archs {
		known := slices.Contains(seccompForeignArchs, a)
		for _, abi := range seccompABIs {
			known = known || abi.arch == a
		}
		if !known {
			return fmt.Errorf("%w: unknown architecture %q", ErrSeccompSpec, a)
		}
	}
	return nil
}

func (s *seccompSpec) addCall(call specs.LinuxSyscall) error {
	ret, err := seccompSpecAction(call.Action, call.ErrnoRet)
	if err != nil {
		return err
	}
	if ret == s.def {
		return nil // runc skips a rule that repeats the default, before reading it further
	}
	groups, err := seccompCondGroups(call.Args)
	if err != nil {
		return err
	}
	for _, name := range call.Names {
		if !seccompKnownName(name) {
			continue // runc ignores a syscall libseccomp does not know
		}
		for _, conds := range groups {
			s.addRule(name, ret, conds)
		}
	}
	return nil
}

// seccompCondGroups is how runc turns a rule's conditions into libseccomp
// rules: all of them in one rule, unless two test the same argument; then
// one rule per condition (so any of them suffices).
func seccompCondGroups(args []specs.LinuxSeccompArg) ([][]specs.LinuxSeccompArg, error) {
	var seen [6]bool
	split := false
	for _, a := range args {
		if a.Index >= 6 {
			return nil, fmt.Errorf("argument index %d (a syscall has 6)", a.Index)
		}
		if !seccompKnownOp(a.Op) {
			return nil, fmt.Errorf("unknown operator %q", a.Op)
		}
		split = split || seen[a.Index]
		seen[a.Index] = true
	}
	if !split {
		return [][]specs.LinuxSeccompArg{args}, nil
	}
	groups := make([][]specs.LinuxSeccompArg, len(args))
	for i := range args {
		groups[i] = args[i : i+1]
	}
	return groups, nil
}

func (s *seccompSpec) addRule(name string, ret uint32, args []specs.LinuxSeccompArg) {
	for id, abi := range seccompABIs {
		a := &s.abis[id]
		if !a.listed {
			continue
		}
		if nr, ok := abi.table[name]; ok {
			a.rules[nr] = append(a.rules[nr], seccompSpecRule{ret: ret, conds: seccompConds(args, !abi.wide)})
		}
		if id == seccompABII386 {
			s.addMultiplexed(a, name, ret, args)
		}
	}
}

// addMultiplexed adds, on i386, the socketcall(2) or ipc(2) form of a
// socket or SysV IPC syscall: libseccomp replaces the rule's first
// argument's condition with "the call number", keeping the others.
func (s *seccompSpec) addMultiplexed(a *seccompSpecABI, name string, ret uint32, args []specs.LinuxSeccompArg) {
	via, call := "socketcall", uint32(0)
	if n, ok := syscallSocketcall[name]; ok {
		call = n
	} else if n, ok := syscallIPC[name]; ok {
		via, call = "ipc", n
	} else {
		return
	}
	muxed := []specs.LinuxSeccompArg{{Index: 0, Value: uint64(call), Op: specs.OpEqualTo}}
	for _, c := range args {
		if c.Index != 0 {
			muxed = append(muxed, c)
		}
	}
	nr := syscallI386[via]
	a.rules[nr] = append(a.rules[nr], seccompSpecRule{ret: ret, conds: seccompConds(muxed, true)})
}

func seccompConds(args []specs.LinuxSeccompArg, narrow bool) []seccompCond {
	conds := make([]seccompCond, len(args))
	for i, a := range args {
		conds[i] = seccompCond{arg: a.Index, op: a.Op, v: a.Value, v2: a.ValueTwo, narrow: narrow}
	}
	return conds
}

// setStubs mirrors runc's ENOSYS stub (patchbpf): on each ABI the filter
// lists, a syscall numbered above every syscall the spec's rules name gets
// ENOSYS instead of the default. Names are resolved as libseccomp does for
// this purpose: i386's multiplexed names count for nothing.
func (s *seccompSpec) setStubs(calls []specs.LinuxSyscall) {
	for id, abi := range seccompABIs {
		a := &s.abis[id]
		if !a.listed {
			continue
		}
		for _, call := range calls {
			for _, name := range call.Names {
				nr, ok := abi.table[name]
				_, muxed := syscallSocketcall[name]
				_, ipc := syscallIPC[name]
				if ok && !(id == seccompABII386 && (muxed || ipc)) && nr > a.stubAbove {
					a.stubAbove = nr
				}
			}
		}
	}
}

// seccompAllowsNew is runc's test for skipping the ENOSYS stub: the default
// already lets unknown syscalls run (TRACE counts: a tracer handles them).
func seccompAllowsNew(def specs.LinuxSeccompAction) bool {
	return def == specs.ActAllow || def == specs.ActLog || def == specs.ActTrace
}

// seccompSpecAction is the return value runc gives a spec action; ERRNO
// and TRACE default to EPERM.
func seccompSpecAction(act specs.LinuxSeccompAction, errno *uint) (uint32, error) {
	data := uint32(unix.EPERM)
	if errno != nil {
		data = uint32(uint16(*errno))
	}
	switch act {
	case specs.ActKill, specs.ActKillThread:
		return unix.SECCOMP_RET_KILL_THREAD, nil
	case specs.ActKillProcess:
		return unix.SECCOMP_RET_KILL_PROCESS, nil
	case specs.ActTrap:
		return unix.SECCOMP_RET_TRAP, nil
	case specs.ActErrno:
		return unix.SECCOMP_RET_ERRNO | data, nil
	case specs.ActTrace:
		return unix.SECCOMP_RET_TRACE | data, nil
	case specs.ActAllow:
		return unix.SECCOMP_RET_ALLOW, nil
	case specs.ActLog:
		return unix.SECCOMP_RET_LOG, nil
	case specs.ActNotify:
		return unix.SECCOMP_RET_USER_NOTIF, nil
	}
	return 0, fmt.Errorf("unknown action %q", act)
}

func seccompKnownOp(op specs.LinuxSeccompOperator) bool {
	switch op {
	case specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
		specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual:
		return true
	}
	return false
}
