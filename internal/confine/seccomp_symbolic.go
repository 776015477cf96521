package confine

import (
	"golang.org/x/sys/unix"
)

// A filter's result for one syscall can depend on the arguments and the
// instruction pointer. To compare it with the spec without trying all
// 2^448 inputs, each filter is first walked symbolically for that syscall
// (nr and arch known, the other words unknown): the walk follows both
// sides of every test on an unknown word and records each test as a
// seccompPred. The candidate search then picks, for each word, values on
// every side of every test, so the concrete runs meet each case of every
// filter and of the spec.

// seccompWords is the number of unknown 32-bit words of seccomp_data: the
// instruction pointer's two halves, then each argument's (low, high).
const seccompWords = 14

// seccompPred is a filter's or the spec's test of an unknown word: it
// compares (word & mask) with k (equal, greater, or any bit set).
type seccompPred struct {
	word uint8
	mask uint32
	k    uint32
}

// seccompArgWord is the word id of one half of argument i.
func seccompArgWord(i uint, high bool) uint8 {
	w := uint8(2 + 2*i)
	if high {
		w++
	}
	return w
}

// seccompSymBudget bounds the steps of one filter's walk for one syscall;
// a filter that branches beyond it on arguments is not enumerated.
const seccompSymBudget = 1 << 16

// seccompVal is a register's or scratch word's content during the walk.
type seccompVal struct {
	kind uint8  // seccompKnown, seccompOfWord or seccompOpaque
	word uint8  // seccompOfWord: the word
	v    uint32 // seccompKnown: the value; seccompOfWord: the mask applied
}

const (
	seccompKnown  = iota // a known value
	seccompOfWord        // (word & v): a word, perhaps masked
	seccompOpaque        // anything else computed from unknown words
)

func seccompConst(v uint32) seccompVal { return seccompVal{kind: seccompKnown, v: v} }

type seccompSymState struct {
	a, x seccompVal
	mem  [unix.BPF_MEMWORDS]seccompVal
}

// seccompAnalysis is what one filter does with one syscall of one ABI.
type seccompAnalysis struct {
	fixed bool   // one action whatever the arguments and instruction pointer
	ret   uint32 // that result, when fixed
	exact bool   // every test on unknown words is a seccompPred
	preds []seccompPred
	steps int // of the symbolic walk
}

type seccompSym struct {
	prog  seccompProg
	data  [seccompDataWords]seccompVal
	steps int
	seen  bool // a return was reached
	out   *seccompAnalysis
}

// seccompAnalyze walks prog for syscall nr of an ABI into out (whose
// preds slice is reused).
func seccompAnalyze(prog seccompProg, abi int, nr uint32, out *seccompAnalysis) {
	a := &seccompABIs[abi]
	// Most filters decide most syscalls from nr and arch alone: a plain
	// run that never loads another word settles them.
	d := [seccompDataWords]uint32{nr | a.base, a.audit}
	known := uint16(0b11)
	if abi == seccompABII386 {
		known = 0b1010_1010_1010_1011 // and the zero high halves
	}
	if ret, ok := prog.runKnown(&d, known); ok {
		*out = seccompAnalysis{fixed: true, ret: ret, exact: true, preds: out.preds[:0]}
		return
	}
	s := seccompSym{prog: prog, out: out}
	defer func() { out.steps = s.steps }()
	s.data[0] = seccompConst(nr | a.base)
	s.data[1] = seccompConst(a.audit)
	for w := uint8(0); w < seccompWords; w++ {
		s.data[2+w] = seccompVal{kind: seccompOfWord, word: w, v: ^uint32(0)}
		if abi == seccompABII386 && w%2 == 1 {
			s.data[2+w] = seccompConst(0) // the kernel zero-extends i386's registers
		}
	}
	*out = seccompAnalysis{fixed: true, exact: true, preds: out.preds[:0]}
	var st seccompSymState
	s.walk(0, &st)
}

func (s *seccompSym) walk(pc int, st *seccompSymState) {
	for ; pc < len(s.prog); pc++ {
		if s.steps++; s.steps > seccompSymBudget {
			s.out.fixed, s.out.exact = false, false
			return
		}
		in := s.prog[pc]
		switch in.code {
		case seccompRetK:
			s.ret(seccompConst(in.k))
			return
		case seccompRetA:
			s.ret(st.a)
			return
		case seccompJa:
			pc += int(in.k)
		default:
			if in.code&0x07 == unix.BPF_JMP {
				if !s.jump(&pc, in, st) {
					return
				}
			} else if !s.step(in, st) {
				return
			}
		}
	}
}

// step runs a load, store or ALU instruction; false ends the path (a
// division by a zero constant returns 0).
func (s *seccompSym) step(in seccompInsn, st *seccompSymState) bool {
	switch in.code {
	case seccompLdAbs:
		st.a = s.data[in.k/4]
	case seccompLdLen:
		st.a = seccompConst(seccompDataWords * 4)
	case seccompLdxLen:
		st.x = seccompConst(seccompDataWords * 4)
	case seccompLdImm:
		st.a = seccompConst(in.k)
	case seccompLdxImm:
		st.x = seccompConst(in.k)
	case seccompLdMem:
		st.a = st.mem[in.k]
	case seccompLdxMem:
		st.x = st.mem[in.k]
	case seccompSt:
		st.mem[in.k] = st.a
	case seccompStx:
		st.mem[in.k] = st.x
	case seccompTax:
		st.x = st.a
	case seccompTxa:
		st.a = st.x
	default:
		b := seccompConst(in.k)
		if in.code&unix.BPF_X != 0 {
			b = st.x
		}
		if st.a.kind == seccompKnown && b.kind == seccompKnown {
			v, ok := seccompALU(in.code, st.a.v, b.v)
			if !ok {
				s.ret(seccompConst(0))
				return false
			}
			st.a = seccompConst(v)
			return true
		}
		st.a = seccompSymALU(in.code, st.a, b)
	}
	return true
}

// seccompSymALU is an ALU instruction on an unknown operand: masking keeps
// track of the word, an operation that changes nothing keeps the value,
// anything else is opaque. A division by an unknown register could also
// end the filter with 0; the opaque result already stops enumeration.
func seccompSymALU(code uint16, a, b seccompVal) seccompVal {
	op := code & 0xf0
	if op == unix.BPF_AND {
		if a.kind == seccompKnown {
			a, b = b, a
		}
		if b.kind == seccompKnown && a.kind == seccompOfWord {
			if a.v&b.v == 0 {
				return seccompConst(0)
			}
			return seccompVal{kind: seccompOfWord, word: a.word, v: a.v & b.v}
		}
		if b.kind == seccompKnown && b.v == 0 {
			return seccompConst(0)
		}
	}
	if b.kind == seccompKnown && op != unix.BPF_NEG {
		switch {
		case b.v == 0 && (op == unix.BPF_ADD || op == unix.BPF_SUB || op == unix.BPF_OR ||
			op == unix.BPF_XOR || op == unix.BPF_LSH || op == unix.BPF_RSH):
			return a
		case b.v == 1 && (op == unix.BPF_MUL || op == unix.BPF_DIV):
			return a
		}
	}
	return seccompVal{kind: seccompOpaque}
}

// jump runs a conditional jump: a known test takes one side, a test on an
// unknown word takes both (the true side first, recursively). It returns
// false when the path ends.
func (s *seccompSym) jump(pc *int, in seccompInsn, st *seccompSymState) bool {
	b := seccompConst(in.k)
	if in.code&unix.BPF_X != 0 {
		b = st.x
	}
	taken, known := s.test(in.code, st.a, b)
	switch {
	case known && taken, in.jt == in.jf:
		*pc += int(in.jt)
	case known:
		*pc += int(in.jf)
	default:
		fork := *st
		s.walk(*pc+1+int(in.jt), &fork)
		if s.steps > seccompSymBudget {
			return false
		}
		*pc += int(in.jf)
	}
	return true
}

// test decides a jump's condition when it can, and records the predicate
// when it cannot.
func (s *seccompSym) test(code uint16, a, b seccompVal) (taken, known bool) {
	if a.kind == seccompKnown && b.kind == seccompKnown {
		return seccompJump(code, a.v, b.v), true
	}
	set := code&0xf0 == unix.BPF_JSET
	word, k := a, b
	if a.kind == seccompKnown {
		word, k = b, a
	}
	if word.kind != seccompOfWord || k.kind != seccompKnown {
		s.out.exact = false // two unknowns, or an opaque value
		return false, false
	}
	if set {
		// (w & mask) & k != 0: a test of the bits mask&k.
		m := word.v & k.v
		if m == 0 {
			return false, true
		}
		s.pred(seccompPred{word: word.word, mask: m, k: 0})
		return false, false
	}
	s.pred(seccompPred{word: word.word, mask: word.v, k: k.v})
	return false, false
}

// pred records a test; seccompCases removes repeats.
func (s *seccompSym) pred(p seccompPred) {
	s.out.preds = append(s.out.preds, p)
}

// ret records a path's result.
func (s *seccompSym) ret(v seccompVal) {
	switch v.kind {
	case seccompKnown:
		if !s.seen {
			s.seen, s.out.ret = true, v.v
		} else if v.v&unix.SECCOMP_RET_ACTION_FULL != s.out.ret&unix.SECCOMP_RET_ACTION_FULL {
			s.out.fixed = false
		}
	case seccompOfWord:
		// The filter returns (part of) an argument: try every action there,
		// and the first value past each action's data range.
		s.out.fixed = false
		for _, act := range seccompActionValues {
			s.pred(seccompPred{word: v.word, mask: v.v, k: act})
			s.pred(seccompPred{word: v.word, mask: v.v, k: act + unix.SECCOMP_RET_DATA + 1})
		}
	default:
		s.out.fixed, s.out.exact = false, false
	}
}
