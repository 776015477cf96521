package confine

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// The classic BPF instructions a seccomp filter may hold: the kernel
// (seccomp_check_filter) refuses any other.
const (
	seccompLdAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	seccompLdLen  = unix.BPF_LD | unix.BPF_W | unix.BPF_LEN
	seccompLdxLen = unix.BPF_LDX | unix.BPF_W | unix.BPF_LEN
	seccompLdImm  = unix.BPF_LD | unix.BPF_IMM
	seccompLdxImm = unix.BPF_LDX | unix.BPF_W | unix.BPF_IMM
	seccompLdMem  = unix.BPF_LD | unix.BPF_MEM
	seccompLdxMem = unix.BPF_LDX | unix.BPF_MEM
	seccompSt     = unix.BPF_ST
	seccompStx    = unix.BPF_STX
	seccompTax    = unix.BPF_MISC | unix.BPF_TAX
	seccompTxa    = unix.BPF_MISC | unix.BPF_TXA
	seccompRetK   = unix.BPF_RET | unix.BPF_K
	seccompRetA   = unix.BPF_RET | unix.BPF_A
	seccompJa     = unix.BPF_JMP | unix.BPF_JA
	seccompNeg    = unix.BPF_ALU | unix.BPF_NEG
)

// seccompDataWords is sizeof(struct seccomp_data) in 32-bit words: nr,
// arch, instruction_pointer (low, high), then args[6] (low, high each).
const seccompDataWords = 16

// seccompInsn is one struct sock_filter, with what decoding derives for
// the interpreter: a dense operation number and absolute jump targets.
type seccompInsn struct {
	code   uint16
	jt, jf uint8
	k      uint32
	op     uint8
	t, f   uint16 // the next instruction when a jump's test holds, fails
}

// seccompProg is a filter the kernel would accept.
type seccompProg []seccompInsn

// seccompDecode decodes a raw struct sock_filter array (little-endian, as
// CRIU stores it on x86) and checks it as the kernel does when a filter is
// installed (bpf_check_classic, then seccomp_check_filter): a program the
// kernel would refuse cannot be restored, and its behaviour is undefined.
func seccompDecode(raw []byte) (seccompProg, error) {
	if len(raw)%8 != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of 8-byte instructions", len(raw))
	}
	n := len(raw) / 8
	if n == 0 || n > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("%d instructions, the kernel loads 1 to %d", n, unix.BPF_MAXINSNS)
	}
	p := make(seccompProg, n)
	for i := range p {
		b := raw[i*8:]
		p[i] = seccompInsn{code: binary.LittleEndian.Uint16(b), jt: b[2], jf: b[3], k: binary.LittleEndian.Uint32(b[4:])}
	}
	for pc := range p {
		if err := p.checkInsn(pc); err != nil {
			return nil, fmt.Errorf("instruction %d (code %#x, k %#x): %w", pc, p[pc].code, p[pc].k, err)
		}
	}
	if last := p[n-1].code; last != seccompRetK && last != seccompRetA {
		return nil, fmt.Errorf("the last instruction (code %#x) is not a return", last)
	}
	if err := p.checkMemory(); err != nil {
		return nil, err
	}
	p.prepare()
	return p, nil
}

// checkInsn applies the kernel's per-instruction rules. Jumps go forward
// only and stay inside the program, so a run takes at most len(p) steps.
func (p seccompProg) checkInsn(pc int) error {
	in := p[pc]
	left := uint32(len(p) - pc - 1) // instructions after this one
	switch in.code {
	case seccompLdAbs:
		if in.k >= seccompDataWords*4 || in.k%4 != 0 {
			return fmt.Errorf("a load outside struct seccomp_data or not 32-bit aligned")
		}
	case seccompLdMem, seccompLdxMem, seccompSt, seccompStx:
		if in.k >= unix.BPF_MEMWORDS {
			return fmt.Errorf("scratch memory word %d of %d", in.k, unix.BPF_MEMWORDS)
		}
	case seccompJa:
		if in.k >= left {
			return fmt.Errorf("a jump past the end")
		}
	case seccompLdLen, seccompLdxLen, seccompLdImm, seccompLdxImm, seccompTax, seccompTxa, seccompRetK, seccompRetA, seccompNeg:
	default:
		return p.checkALUJump(in, left)
	}
	return nil
}

func (p seccompProg) checkALUJump(in seccompInsn, left uint32) error {
	op, src := in.code&0xf0, in.code&unix.BPF_X
	switch in.code &^ (0xf0 | unix.BPF_X) {
	case unix.BPF_ALU:
		switch op {
		case unix.BPF_ADD, unix.BPF_SUB, unix.BPF_MUL, unix.BPF_AND, unix.BPF_OR, unix.BPF_XOR:
			return nil
		case unix.BPF_DIV:
			if src == unix.BPF_K && in.k == 0 {
				return fmt.Errorf("a division by zero")
			}
			return nil
		case unix.BPF_LSH, unix.BPF_RSH:
			if src == unix.BPF_K && in.k >= 32 {
				return fmt.Errorf("a shift by %d", in.k)
			}
			return nil
		}
	case unix.BPF_JMP:
		switch op {
		case unix.BPF_JEQ, unix.BPF_JGT, unix.BPF_JGE, unix.BPF_JSET:
			if uint32(in.jt) >= left || uint32(in.jf) >= left {
				return fmt.Errorf("a jump past the end")
			}
			return nil
		}
	}
	return fmt.Errorf("an instruction seccomp does not allow")
}

// checkMemory refuses a read of scratch memory that some path reaches
// before any store, with the kernel's own pass (check_load_and_stores).
func (p seccompProg) checkMemory() error {
	masks := make([]uint16, len(p))
	for i := range masks {
		masks[i] = 0xffff
	}
	var valid uint16
	for pc, in := range p {
		valid &= masks[pc]
		switch {
		case in.code == seccompSt || in.code == seccompStx:
			valid |= 1 << in.k
		case in.code == seccompLdMem || in.code == seccompLdxMem:
			if valid&(1<<in.k) == 0 {
				return fmt.Errorf("instruction %d reads scratch memory word %d before any store", pc, in.k)
			}
		case in.code == seccompJa:
			masks[pc+1+int(in.k)] &= valid
			valid = 0xffff
		case in.code&0x07 == unix.BPF_JMP:
			masks[pc+1+int(in.jt)] &= valid
			masks[pc+1+int(in.jf)] &= valid
			valid = 0xffff
		}
	}
	return nil
}
