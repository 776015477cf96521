package confine

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

//go:generate go run ./gensyscall -o syscall_table_x86.go

// seccompNrLimit bounds the syscall numbers checked on each ABI: x86_64
// and i386 number theirs below 500 and x32 below 548, so the margin covers
// the syscalls of kernels newer than the tables. A number no kernel
// assigns fails with ENOSYS whatever a filter says.
const seccompNrLimit = 1024

// seccompX32Bit marks an x32 syscall: x32 shares x86_64's audit arch.
const seccompX32Bit = 0x40000000

// seccompABI is one of the ways a process on an x86-64 kernel makes
// syscalls, as seccomp_data shows them.
type seccompABI struct {
	name   string            // as messages name it
	arch   specs.Arch        // the spec's name for it
	audit  uint32            // seccomp_data.arch
	base   uint32            // added to the table's numbers in seccomp_data.nr
	wide   bool              // arguments are 64-bit: libseccomp compares both halves
	table  map[string]uint32 // numbers by name, without base
	native bool              // runc's filter always includes it
}

// seccompABIs are checked in this order; the index is the ABI's id.
var seccompABIs = [...]seccompABI{
	{name: "x86_64", arch: specs.ArchX86_64, audit: unix.AUDIT_ARCH_X86_64, wide: true, table: syscallX86_64, native: true},
	{name: "x32", arch: specs.ArchX32, audit: unix.AUDIT_ARCH_X86_64, base: seccompX32Bit, table: syscallX32},
	{name: "x86", arch: specs.ArchX86, audit: unix.AUDIT_ARCH_I386, table: syscallI386},
}

// The ids of i386 and x86_64 in seccompABIs.
const (
	seccompABIX86_64 = 0
	seccompABII386   = 2
)

// seccompName names syscall nr (without the x32 bit) of an ABI.
func seccompName(abi int, nr uint32) string {
	for name, n := range seccompABIs[abi].table {
		if n == nr {
			return name
		}
	}
	return fmt.Sprintf("syscall %d", nr)
}

// seccompKnownName reports whether libseccomp knows a syscall name on any
// x86 ABI, or as one of i386's multiplexed calls: runc skips a rule whose
// name libseccomp does not know.
func seccompKnownName(name string) bool {
	for _, abi := range seccompABIs {
		if _, ok := abi.table[name]; ok {
			return true
		}
	}
	_, sock := syscallSocketcall[name]
	_, ipc := syscallIPC[name]
	return sock || ipc
}
