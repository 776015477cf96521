package confine

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// seccompBudget bounds the BPF steps of one check (about a second): an
// edited image could otherwise hold a chain of 32768 instructions whose
// every syscall needs thousands of runs, and stall the restore for hours.
const seccompBudget = 1 << 28

// seccompChecker compares a decoded chain with a compiled spec, one
// syscall at a time, reusing its buffers across syscalls.
type seccompChecker struct {
	spec     *seccompSpec
	progs    []seccompProg
	insns    int // the chain's instructions: the most steps of one run
	spent    int // steps so far, counted at most
	analyses []seccompAnalysis
	preds    []seccompPred
	cases    [seccompWords][]uint32
}

func newSeccompChecker(spec *seccompSpec, progs []seccompProg) *seccompChecker {
	c := &seccompChecker{spec: spec, progs: progs, analyses: make([]seccompAnalysis, len(progs))}
	for _, p := range progs {
		c.insns += len(p)
	}
	return c
}

// charge counts steps against seccompBudget.
func (c *seccompChecker) charge(steps int) error {
	if c.spent += steps; c.spent > seccompBudget {
		return fmt.Errorf("%w: checking the filters would take more than %d BPF steps", ErrSeccompUnverifiable, seccompBudget)
	}
	return nil
}

// syscall checks syscall nr of an ABI. When neither the chain nor the spec
// looks at the arguments, one comparison decides. Otherwise every
// combination of the candidate values is run through both.
func (c *seccompChecker) syscall(abi int, nr uint32) error {
	fixedRet, allFixed, exact := uint32(unix.SECCOMP_RET_ALLOW), true, true
	for i, p := range c.progs {
		a := &c.analyses[i]
		seccompAnalyze(p, abi, nr, a)
		if err := c.charge(len(p) + a.steps); err != nil {
			return err
		}
		if a.fixed {
			fixedRet = seccompMin(fixedRet, a.ret)
		}
		allFixed = allFixed && a.fixed
		exact = exact && (a.fixed || a.exact)
	}
	if want, ok := c.spec.fixed(abi, nr); ok && allFixed {
		return c.compare(abi, nr, fixedRet, want, nil)
	}
	c.preds = c.preds[:0]
	for i := range c.analyses {
		c.preds = append(c.preds, c.analyses[i].preds...)
	}
	c.spec.preds(abi, nr, func(p seccompPred) { c.preds = append(c.preds, p) })
	complete, all, runs := seccompCases(c.preds, &c.cases)
	if err := c.charge(runs * c.insns); err != nil {
		return err
	}
	if err := c.tryCases(abi, nr, all); err != nil || complete && exact {
		return err
	}
	// The cases tried only sample the arguments. The filters that do not
	// look at them still decide if they alone are as strict as whatever
	// the spec gives for any arguments.
	floor := c.spec.floor(abi, nr)
	if seccompLevelOf(fixedRet) <= seccompLevelOf(floor) {
		return nil
	}
	return &SeccompError{Syscall: seccompName(abi, nr), Number: nr | seccompABIs[abi].base,
		Arch: seccompABIs[abi].name, Spec: seccompActionName(floor), Unsure: true}
}

// tryCases runs every combination of the candidate values (all), or else
// each word's values alone, the others zero: a sample.
func (c *seccompChecker) tryCases(abi int, nr uint32, all bool) error {
	var d [seccompDataWords]uint32
	d[0], d[1] = nr|seccompABIs[abi].base, seccompABIs[abi].audit
	try := func() error {
		got := uint32(unix.SECCOMP_RET_ALLOW)
		for _, p := range c.progs {
			got = seccompMin(got, p.run(&d))
		}
		return c.compare(abi, nr, got, c.spec.eval(abi, nr, &d), &d)
	}
	if !all {
		for w := range c.cases {
			for _, v := range c.cases[w] {
				d[2+w] = v
				if err := try(); err != nil {
					return err
				}
			}
			d[2+w] = 0
		}
		return nil
	}
	var idx [seccompWords]int
	for {
		for w := range idx {
			d[2+w] = c.cases[w][idx[w]]
		}
		if err := try(); err != nil {
			return err
		}
		if !seccompNext(&idx, &c.cases) {
			return nil
		}
	}
}

// seccompNext advances a mixed-radix counter over the cases; false once
// every combination was visited.
func seccompNext(idx *[seccompWords]int, cases *[seccompWords][]uint32) bool {
	for w := range idx {
		if idx[w]++; idx[w] < len(cases[w]) {
			return true
		}
		idx[w] = 0
	}
	return false
}

// compare refuses a chain result weaker than the spec's.
func (c *seccompChecker) compare(abi int, nr, got, want uint32, d *[seccompDataWords]uint32) error {
	if seccompLevelOf(got) <= seccompLevelOf(want) {
		return nil
	}
	e := &SeccompError{Syscall: seccompName(abi, nr), Number: nr | seccompABIs[abi].base,
		Arch: seccompABIs[abi].name, Image: seccompActionName(got), Spec: seccompActionName(want)}
	if d != nil {
		e.IP = uint64(d[2]) | uint64(d[3])<<32
		for i := range e.Args {
			e.Args[i] = uint64(d[4+2*i]) | uint64(d[5+2*i])<<32
		}
	}
	return e
}
