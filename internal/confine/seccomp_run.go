package confine

import (
	"golang.org/x/sys/unix"
)

// The interpreter's operations.
const (
	seccompOpLdAbs = iota
	seccompOpLdLen
	seccompOpLdxLen
	seccompOpLdImm
	seccompOpLdxImm
	seccompOpLdMem
	seccompOpLdxMem
	seccompOpSt
	seccompOpStx
	seccompOpTax
	seccompOpTxa
	seccompOpRetK
	seccompOpRetA
	seccompOpJa
	seccompOpJeqK
	seccompOpJgtK
	seccompOpJgeK
	seccompOpJsetK
	seccompOpJumpX // a conditional jump on X
	seccompOpALU
)

// seccompSimpleOps are the operations of instructions known by code alone.
var seccompSimpleOps = map[uint16]uint8{
	seccompLdAbs: seccompOpLdAbs, seccompLdLen: seccompOpLdLen, seccompLdxLen: seccompOpLdxLen,
	seccompLdImm: seccompOpLdImm, seccompLdxImm: seccompOpLdxImm, seccompLdMem: seccompOpLdMem,
	seccompLdxMem: seccompOpLdxMem, seccompSt: seccompOpSt, seccompStx: seccompOpStx,
	seccompTax: seccompOpTax, seccompTxa: seccompOpTxa, seccompRetK: seccompOpRetK,
	seccompRetA: seccompOpRetA, seccompJa: seccompOpJa,
	unix.BPF_JMP | unix.BPF_JEQ: seccompOpJeqK, unix.BPF_JMP | unix.BPF_JGT: seccompOpJgtK,
	unix.BPF_JMP | unix.BPF_JGE: seccompOpJgeK, unix.BPF_JMP | unix.BPF_JSET: seccompOpJsetK,
}

// prepare sets the fields the interpreter uses; p has been checked.
func (p seccompProg) prepare() {
	for pc := range p {
		in := &p[pc]
		op, ok := seccompSimpleOps[in.code]
		switch {
		case ok:
		case in.code&0x07 == unix.BPF_JMP:
			op = seccompOpJumpX
		default:
			op = seccompOpALU
		}
		in.op = op
		in.t, in.f = uint16(pc+1+int(in.jt)), uint16(pc+1+int(in.jf))
		if in.code == seccompJa {
			in.t = uint16(pc + 1 + int(in.k))
		}
	}
}

// run runs the filter on seccomp_data d (as 32-bit words) and returns its
// result. A and X start at zero, as the kernel's translation sets them.
func (p seccompProg) run(d *[seccompDataWords]uint32) uint32 {
	ret, _ := p.runKnown(d, 0xffff)
	return ret
}

// runKnown is run where only the words of d in the bit mask known are
// known: ok is false if the filter loads another. Jumps go forward, so the
// loop ends within len(p) steps.
func (p seccompProg) runKnown(d *[seccompDataWords]uint32, known uint16) (ret uint32, ok bool) {
	var a, x uint32
	var mem [unix.BPF_MEMWORDS]uint32
	for pc := 0; pc < len(p); {
		in := &p[pc]
		pc++
		switch in.op {
		case seccompOpLdAbs:
			if known&(1<<(in.k/4)) == 0 {
				return 0, false
			}
			a = d[in.k/4]
		case seccompOpJeqK:
			pc = int(in.f)
			if a == in.k {
				pc = int(in.t)
			}
		case seccompOpJgtK:
			pc = int(in.f)
			if a > in.k {
				pc = int(in.t)
			}
		case seccompOpJgeK:
			pc = int(in.f)
			if a >= in.k {
				pc = int(in.t)
			}
		case seccompOpJsetK:
			pc = int(in.f)
			if a&in.k != 0 {
				pc = int(in.t)
			}
		case seccompOpRetK:
			return in.k, true
		case seccompOpRetA:
			return a, true
		case seccompOpJa:
			pc = int(in.t)
		case seccompOpJumpX:
			pc = int(in.f)
			if seccompJump(in.code, a, x) {
				pc = int(in.t)
			}
		case seccompOpALU:
			b := in.k
			if in.code&unix.BPF_X != 0 {
				b = x
			}
			var fine bool
			if a, fine = seccompALU(in.code, a, b); !fine {
				return 0, true // a division by zero ends the filter with 0, KILL_THREAD
			}
		default:
			seccompMove(in, &a, &x, &mem)
		}
	}
	return 0, true // not reached: decoding requires a return last
}

// seccompMove runs the instructions that only move values.
func seccompMove(in *seccompInsn, a, x *uint32, mem *[unix.BPF_MEMWORDS]uint32) {
	switch in.op {
	case seccompOpLdLen:
		*a = seccompDataWords * 4
	case seccompOpLdxLen:
		*x = seccompDataWords * 4
	case seccompOpLdImm:
		*a = in.k
	case seccompOpLdxImm:
		*x = in.k
	case seccompOpLdMem:
		*a = mem[in.k]
	case seccompOpLdxMem:
		*x = mem[in.k]
	case seccompOpSt:
		mem[in.k] = *a
	case seccompOpStx:
		mem[in.k] = *x
	case seccompOpTax:
		*x = *a
	case seccompOpTxa:
		*a = *x
	}
}

// seccompJump is a conditional jump's test.
func seccompJump(code uint16, a, b uint32) bool {
	switch code & 0xf0 {
	case unix.BPF_JEQ:
		return a == b
	case unix.BPF_JGT:
		return a > b
	case unix.BPF_JGE:
		return a >= b
	}
	return a&b != 0 // BPF_JSET
}

// seccompALU is an ALU instruction on 32-bit values; ok is false for a
// division by zero. Shifts by a register use its low five bits, as the
// kernel's interpreter and JITs do.
func seccompALU(code uint16, a, b uint32) (v uint32, ok bool) {
	switch code & 0xf0 {
	case unix.BPF_ADD:
		return a + b, true
	case unix.BPF_SUB:
		return a - b, true
	case unix.BPF_MUL:
		return a * b, true
	case unix.BPF_DIV:
		if b == 0 {
			return 0, false
		}
		return a / b, true
	case unix.BPF_AND:
		return a & b, true
	case unix.BPF_OR:
		return a | b, true
	case unix.BPF_XOR:
		return a ^ b, true
	case unix.BPF_LSH:
		return a << (b & 31), true
	case unix.BPF_RSH:
		return a >> (b & 31), true
	}
	return -a, true // BPF_NEG
}
