package confine

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// fixed returns what the spec gives syscall nr of an ABI when no argument
// matters to it; ok is false when some rule tests an argument.
func (s *seccompSpec) fixed(abi int, nr uint32) (ret uint32, ok bool) {
	a := &s.abis[abi]
	if !a.listed {
		return seccompBadArch, true
	}
	if a.stubAbove != 0 && nr > a.stubAbove {
		return seccompRetENOSYS, true
	}
	for _, r := range a.rules[nr] {
		if len(r.conds) > 0 {
			return 0, false
		}
	}
	return s.pick(a.rules[nr], nil), true
}

// eval returns what the spec gives a syscall with the arguments of d.
func (s *seccompSpec) eval(abi int, nr uint32, d *[seccompDataWords]uint32) uint32 {
	if ret, ok := s.fixed(abi, nr); ok {
		return ret
	}
	return s.pick(s.abis[abi].rules[nr], d)
}

// pick returns the most permissive action among the rules whose
// conditions all hold (d nil: rules without conditions), else the default.
// Several rules can match one call (a rule without conditions beside one
// with, or the per-condition rules runc splits); taking the most permissive
// means a filter runc built from this same spec is never found weaker than
// the spec, so the check cannot refuse a checkpoint of its own spec. The
// image's filter still has to be as strict as that, syscall by syscall.
func (s *seccompSpec) pick(rules []seccompSpecRule, d *[seccompDataWords]uint32) uint32 {
	best, found := s.def, false
	for _, r := range rules {
		if d == nil && len(r.conds) > 0 {
			continue
		}
		if !r.holds(d) {
			continue
		}
		if !found || seccompLevelOf(r.ret) > seccompLevelOf(best) {
			best, found = r.ret, true
		}
	}
	return best
}

// floor is the strictest action the spec can give syscall nr, for any
// arguments: a bound used when the arguments' cases cannot be enumerated.
func (s *seccompSpec) floor(abi int, nr uint32) uint32 {
	if ret, ok := s.fixed(abi, nr); ok {
		return ret
	}
	low := s.def
	for _, r := range s.abis[abi].rules[nr] {
		if seccompLevelOf(r.ret) < seccompLevelOf(low) {
			low = r.ret
		}
	}
	return low
}

func (r seccompSpecRule) holds(d *[seccompDataWords]uint32) bool {
	for _, c := range r.conds {
		if !c.holds(d) {
			return false
		}
	}
	return true
}

// holds compares an argument as libseccomp's filter does: unsigned, on 64
// bits for x86_64 and on the low 32 bits for x32 and i386; MASKED_EQ is
// (arg & value) == (valueTwo & value).
func (c seccompCond) holds(d *[seccompDataWords]uint32) bool {
	arg := uint64(d[4+2*c.arg]) | uint64(d[5+2*c.arg])<<32
	v, v2 := c.v, c.v2
	if c.narrow {
		arg, v, v2 = uint64(uint32(arg)), uint64(uint32(v)), uint64(uint32(v2))
	}
	switch c.op {
	case specs.OpNotEqual:
		return arg != v
	case specs.OpLessThan:
		return arg < v
	case specs.OpLessEqual:
		return arg <= v
	case specs.OpEqualTo:
		return arg == v
	case specs.OpGreaterEqual:
		return arg >= v
	case specs.OpGreaterThan:
		return arg > v
	}
	return arg&v == v2&v // specs.OpMaskedEqual
}

// preds adds, for the candidate search, the argument words the spec's
// rules for syscall nr test: each condition splits an argument at its
// value, on the low half and (on x86_64) the high half.
func (s *seccompSpec) preds(abi int, nr uint32, add func(seccompPred)) {
	if _, ok := s.fixed(abi, nr); ok {
		return
	}
	for _, r := range s.abis[abi].rules[nr] {
		for _, c := range r.conds {
			c.preds(add)
		}
	}
}

func (c seccompCond) preds(add func(seccompPred)) {
	lo, hi := seccompArgWord(c.arg, false), seccompArgWord(c.arg, true)
	mask, k := ^uint64(0), c.v
	if c.op == specs.OpMaskedEqual {
		mask, k = c.v, c.v2&c.v
	}
	if uint32(mask) != 0 {
		add(seccompPred{word: lo, mask: uint32(mask), k: uint32(k)})
	}
	if !c.narrow && uint32(mask>>32) != 0 {
		add(seccompPred{word: hi, mask: uint32(mask >> 32), k: uint32(k >> 32)})
	}
}
