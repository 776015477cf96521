package confine

import (
	"encoding/binary"
	"fmt"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/seccomp"
	"golang.org/x/sys/unix"
)

// seccompMaxPathInsns is the kernel's bound on a chain (MAX_INSNS_PER_PATH):
// the sum of each filter's length plus 4. A longer chain cannot be
// restored.
const seccompMaxPathInsns = 32768

// seccompRestoredFlags are the filter flags CRIU records (LOG, from the
// kernel's metadata) or sets itself (TSYNC). It passes a filter's flags to
// seccomp(2) on restore, so any other flag in an image was put there: one
// (SPEC_ALLOW) turns off a mitigation the spec's filter keeps, another
// (NEW_LISTENER) hands the restored process the listener of its own
// filter.
const seccompRestoredFlags = unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_LOG

// SeccompChain builds the chain CRIU restores for a thread whose core
// image names filter index of seccomp.img: that filter, then its prev, and
// so on until a filter without prev (as CRIU's seccomp_prepare_threads
// walks them). CRIU writes a thread's oldest filter first and gives each
// newer one the index of the one before as prev, so the thread's index is
// its newest filter. The order of the result does not matter to the
// kernel, which runs them all. An index outside the image, a length that
// is not whole instructions, a loop, or a chain longer than the kernel
// loads is ErrSeccompMalformed (CRIU would fail, or never end); a flag CRIU
// does not record is ErrSeccompWeaker.
func SeccompChain(filters []*seccomp.SeccompFilter, index uint32) ([][]byte, error) {
	var chain [][]byte
	insns := 0
	for i := index; ; i = filters[i].GetPrev() {
		if int(i) >= len(filters) || filters[i] == nil {
			return nil, fmt.Errorf("%w: filter %d: seccomp.img holds %d filters", ErrSeccompMalformed, i, len(filters))
		}
		f := filters[i]
		data := f.GetFilter()
		if len(data)%8 != 0 {
			return nil, fmt.Errorf("%w: filter %d: %d bytes is not a whole number of 8-byte instructions", ErrSeccompMalformed, i, len(data))
		}
		if extra := f.GetFlags() &^ seccompRestoredFlags; extra != 0 {
			return nil, fmt.Errorf("%w: filter %d asks seccomp(2) for flags %#x, which CRIU never records", ErrSeccompWeaker, i, extra)
		}
		chain = append(chain, data)
		if insns += len(data)/8 + 4; insns > seccompMaxPathInsns || len(chain) > len(filters) {
			return nil, fmt.Errorf("%w: the chain from filter %d loops or exceeds the kernel's %d instructions", ErrSeccompMalformed, index, seccompMaxPathInsns)
		}
		if f.Prev == nil {
			return chain, nil
		}
	}
}

// SeccompThreadChain is the chain CRIU restores for one thread, from its
// core image: none (seccomp disabled), the equivalent of strict mode, or
// the filters SeccompChain walks. CRIU 3.x kept a task's seccomp in its
// task core; today's CRIU still lets those fields, when present in a
// process's main thread's core (leader), override that thread's own
// (cr-restore.c, check_core), so they are read the same way here. A mode
// CRIU does not know is ErrSeccompMalformed.
func SeccompThreadChain(filters []*seccomp.SeccompFilter, core *criucore.CoreEntry, leader bool) ([][]byte, error) {
	tc := core.GetThreadCore()
	if tc == nil {
		return nil, fmt.Errorf("%w: the core image has no thread_core", ErrSeccompMalformed)
	}
	mode, index := criucore.SeccompMode_disabled, tc.GetSeccompFilter()
	if tc.SeccompMode != nil {
		mode = tc.GetSeccompMode()
	}
	if task := core.GetTc(); leader && task != nil {
		if task.OldSeccompMode != nil {
			mode = task.GetOldSeccompMode()
		}
		if task.OldSeccompFilter != nil {
			index = task.GetOldSeccompFilter()
		}
	}
	switch mode {
	case criucore.SeccompMode_disabled:
		return nil, nil
	case criucore.SeccompMode_strict:
		return [][]byte{seccompStrict()}, nil
	case criucore.SeccompMode_filter:
		return SeccompChain(filters, index)
	}
	return nil, fmt.Errorf("%w: seccomp mode %d", ErrSeccompMalformed, mode)
}

// seccompStrict is strict mode as a filter: the kernel lets through read,
// write, exit and sigreturn (rt_sigreturn on x86_64) and kills the thread
// on anything else; an x32 call never matches (its number carries the x32
// bit) and i386 has its own numbers.
func seccompStrict() []byte {
	allow64 := []uint32{syscallX86_64["read"], syscallX86_64["write"], syscallX86_64["exit"], syscallX86_64["rt_sigreturn"]}
	allow32 := []uint32{syscallI386["read"], syscallI386["write"], syscallI386["exit"], syscallI386["sigreturn"]}
	const allow = 15 // the index of the final "ret ALLOW"
	p := seccompProg{
		{code: seccompLdAbs, k: 4},
		{code: unix.BPF_JMP | unix.BPF_JEQ, jt: 7, k: unix.AUDIT_ARCH_I386},   // to 9
		{code: unix.BPF_JMP | unix.BPF_JEQ, jf: 5, k: unix.AUDIT_ARCH_X86_64}, // else 8
		{code: seccompLdAbs, k: 0},
	}
	for _, nr := range allow64 {
		p = append(p, seccompInsn{code: unix.BPF_JMP | unix.BPF_JEQ, jt: uint8(allow - len(p) - 1), k: nr})
	}
	p = append(p, seccompInsn{code: seccompRetK, k: unix.SECCOMP_RET_KILL_THREAD}, seccompInsn{code: seccompLdAbs, k: 0})
	for _, nr := range allow32 {
		p = append(p, seccompInsn{code: unix.BPF_JMP | unix.BPF_JEQ, jt: uint8(allow - len(p) - 1), k: nr})
	}
	p = append(p, seccompInsn{code: seccompRetK, k: unix.SECCOMP_RET_KILL_THREAD}, seccompInsn{code: seccompRetK, k: unix.SECCOMP_RET_ALLOW})
	return p.encode()
}

// encode is the raw struct sock_filter array of p, little-endian.
func (p seccompProg) encode() []byte {
	raw := make([]byte, 8*len(p))
	for i, in := range p {
		binary.LittleEndian.PutUint16(raw[8*i:], in.code)
		raw[8*i+2], raw[8*i+3] = in.jt, in.jf
		binary.LittleEndian.PutUint32(raw[8*i+4:], in.k)
	}
	return raw
}
