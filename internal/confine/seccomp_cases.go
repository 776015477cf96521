package confine

import (
	"cmp"
	"math/bits"
	"slices"
)

// seccompMaxCases bounds the argument vectors tried for one syscall.
const seccompMaxCases = 4096

// seccompSmallMask is the most bits of a word that tests with different
// masks may cover and still be enumerated bit by bit.
const seccompSmallMask = 10

// seccompCases builds the values to try for each unknown word from the
// tests on it. When a word's tests all use one mask, the values on every
// side of each test's k (among the values the mask lets through) meet
// every case; when the masks differ but cover few bits, all their
// combinations do. complete is false when neither holds, or when the
// product of the words' counts of values exceeds seccompMaxCases; the
// values then only sample the cases: all is false, and each word's values
// are to be tried alone. runs is how many runs that makes. preds is
// sorted.
func seccompCases(preds []seccompPred, out *[seccompWords][]uint32) (complete, all bool, runs int) {
	slices.SortFunc(preds, func(a, b seccompPred) int {
		return cmp.Or(cmp.Compare(a.word, b.word), cmp.Compare(a.mask, b.mask), cmp.Compare(a.k, b.k))
	})
	preds = slices.Compact(preds)
	complete, product, sum := true, 1, 0
	for w := range out {
		out[w] = append(out[w][:0], 0)
		lo, _ := slices.BinarySearchFunc(preds, uint8(w), func(p seccompPred, w uint8) int { return cmp.Compare(p.word, w) })
		hi, _ := slices.BinarySearchFunc(preds, uint8(w+1), func(p seccompPred, w uint8) int { return cmp.Compare(p.word, w) })
		mine := preds[lo:hi]
		masks, union := 0, uint32(0)
		for i, p := range mine {
			if i == 0 || p.mask != mine[i-1].mask {
				masks++
			}
			union |= p.mask
		}
		switch {
		case masks == 0:
		case masks > 1 && bits.OnesCount32(union) <= seccompSmallMask:
			out[w] = seccompSubmasks(union, out[w])
		default:
			complete = complete && masks == 1
			for _, p := range mine {
				out[w] = seccompAround(p, out[w])
			}
		}
		slices.Sort(out[w])
		out[w] = slices.Compact(out[w])
		sum += len(out[w])
		if product *= len(out[w]); product > seccompMaxCases {
			product, complete = seccompMaxCases+1, false
		}
	}
	if product > seccompMaxCases {
		return complete, false, sum
	}
	return complete, true, product
}

// seccompSubmasks appends every value of the bits of m.
func seccompSubmasks(m uint32, vals []uint32) []uint32 {
	for s := m; ; s = (s - 1) & m {
		vals = append(vals, s)
		if s == 0 {
			return vals
		}
	}
}

// seccompAround appends the values of p's mask on each side of p.k and at
// it: with them, (w & mask) falls below, at and above every k.
func seccompAround(p seccompPred, vals []uint32) []uint32 {
	m, k := p.mask, p.k
	vals = append(vals, m, m&-m) // all bits, and the lowest
	if v, ok := seccompCeilSub(k, m); ok {
		vals = append(vals, v)
	}
	if k < ^uint32(0) {
		if v, ok := seccompCeilSub(k+1, m); ok {
			vals = append(vals, v)
		}
	}
	vals = append(vals, seccompFloorSub(k, m))
	if k > 0 {
		vals = append(vals, seccompFloorSub(k-1, m))
	}
	return vals
}

// seccompFloorSub is the largest value of the bits of m that is <= k.
func seccompFloorSub(k, m uint32) uint32 {
	bad := k &^ m // bits of k that m cannot set
	if bad == 0 {
		return k
	}
	p := 31 - bits.LeadingZeros32(bad)
	above := k &^ (1<<(p+1) - 1) // k's bits above p, all in m
	return above | m&(1<<p-1)
}

// seccompCeilSub is the smallest value of the bits of m that is >= k.
func seccompCeilSub(k, m uint32) (uint32, bool) {
	bad := k &^ m
	if bad == 0 {
		return k, true
	}
	p := 31 - bits.LeadingZeros32(bad)
	// Set the lowest bit of m above p that k lacks, keep k's bits above
	// it, clear the rest.
	for q := p + 1; q < 32; q++ {
		bit := uint32(1) << q
		if m&bit != 0 && k&bit == 0 {
			return k&^(bit<<1-1) | bit, true
		}
	}
	return 0, false
}
