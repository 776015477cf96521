package confine

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A filter the kernel would refuse to load is refused, whatever the spec:
// the interpreter only runs programs whose every jump goes forward inside
// them, and whose scratch reads follow stores.
func TestSeccompMalformedFilters(t *testing.T) {
	long := make(seccompProg, unix.BPF_MAXINSNS+1)
	for i := range long {
		long[i] = seccompInsn{code: seccompRetK, k: seccompAllowRet}
	}
	for name, raw := range map[string][]byte{
		"empty":             {},
		"partial":           seccompNewAsm(t).ret(seccompAllowRet).bytes()[:7],
		"too long":          long.encode(),
		"no return last":    seccompNewAsm(t).ret(seccompAllowRet).ld(seccompOffNr).bytes(),
		"jump past the end": (seccompProg{{code: seccompJEQ, jt: 1}, {code: seccompRetK}}).encode(),
		"ja past the end":   (seccompProg{{code: seccompJa, k: 1}, {code: seccompRetK}}).encode(),
		"byte load":         seccompNewAsm(t).op(unix.BPF_LD|unix.BPF_B|unix.BPF_ABS, 0).ret(seccompAllowRet).bytes(),
		"unaligned load":    seccompNewAsm(t).ld(2).ret(seccompAllowRet).bytes(),
		"load past data":    seccompNewAsm(t).ld(64).ret(seccompAllowRet).bytes(),
		"division by zero":  seccompNewAsm(t).op(unix.BPF_ALU|unix.BPF_DIV|unix.BPF_K, 0).ret(seccompAllowRet).bytes(),
		"shift by 32":       seccompNewAsm(t).op(unix.BPF_ALU|unix.BPF_LSH|unix.BPF_K, 32).ret(seccompAllowRet).bytes(),
		"modulo":            seccompNewAsm(t).op(unix.BPF_ALU|unix.BPF_MOD|unix.BPF_K, 3).ret(seccompAllowRet).bytes(),
		"scratch word 16":   seccompNewAsm(t).op(seccompSt, 16).ret(seccompAllowRet).bytes(),
		"read before store": seccompNewAsm(t).op(seccompLdMem, 3).op(seccompRetA, 0).bytes(),
		"store on one path": seccompNewAsm(t).ld(seccompOffNr).jmp(seccompJEQ, 1, "", "load").op(seccompSt, 0).
			label("load").op(seccompLdMem, 0).op(seccompRetA, 0).bytes(),
	} {
		if err := CheckSeccomp(seccompDenySpec("mount"), [][]byte{raw}); !errors.Is(err, ErrSeccompMalformed) {
			t.Errorf("%s: got %v, want ErrSeccompMalformed", name, err)
		}
	}
}

// The interpreter computes as the kernel does: 32-bit ALU, scratch
// memory, X, the data length, and 0 (KILL_THREAD) on a division by a zero
// register.
func TestSeccompInterpreter(t *testing.T) {
	alu := func(op uint16, k uint32) seccompInsn { return seccompInsn{code: unix.BPF_ALU | op | unix.BPF_K, k: k} }
	d := [seccompDataWords]uint32{0: 7, 4: 0xfffffff0}
	for name, c := range map[string]struct {
		prog seccompProg
		want uint32
	}{
		"arithmetic": {seccompProg{{code: seccompLdAbs, k: 0}, alu(unix.BPF_MUL, 6), alu(unix.BPF_ADD, 3),
			alu(unix.BPF_SUB, 5), alu(unix.BPF_DIV, 2), alu(unix.BPF_LSH, 4), alu(unix.BPF_RSH, 1),
			alu(unix.BPF_XOR, 0xff), alu(unix.BPF_OR, 0x100), alu(unix.BPF_AND, 0x1f0), {code: seccompRetA}}, 0x150},
		"wraps":   {seccompProg{{code: seccompLdAbs, k: 16}, alu(unix.BPF_ADD, 0x20), {code: seccompRetA}}, 0x10},
		"negates": {seccompProg{{code: seccompLdImm, k: 1}, {code: seccompNeg}, {code: seccompRetA}}, 0xffffffff},
		"scratch and X": {seccompProg{{code: seccompLdImm, k: 5}, {code: seccompSt, k: 2}, {code: seccompLdxLen},
			{code: seccompTxa}, {code: seccompLdxMem, k: 2}, {code: unix.BPF_ALU | unix.BPF_ADD | unix.BPF_X}, {code: seccompRetA}}, 69},
		"division by a zero X": {seccompProg{{code: seccompLdImm, k: 5}, {code: unix.BPF_ALU | unix.BPF_DIV | unix.BPF_X},
			{code: seccompRetK, k: seccompAllowRet}}, 0},
		"shift by X uses 5 bits": {seccompProg{{code: seccompLdxImm, k: 33}, {code: seccompLdImm, k: 1},
			{code: unix.BPF_ALU | unix.BPF_LSH | unix.BPF_X}, {code: seccompRetA}}, 2},
		"jset": {seccompProg{{code: seccompLdAbs, k: 0}, {code: seccompJSET, k: 2, jf: 1}, {code: seccompRetK, k: 1}, {code: seccompRetK, k: 2}}, 1},
	} {
		raw := c.prog.encode()
		p, err := seccompDecode(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := p.run(&d); got != c.want {
			t.Errorf("%s: got %#x, want %#x", name, got, c.want)
		}
	}
}

// The values tried for a masked word fall on every side of each test.
func TestSeccompSubmaskBounds(t *testing.T) {
	const m = 0b1011_0100
	for k := uint32(0); k < 0x200; k++ {
		var floor, ceil uint32
		hasCeil := false
		for s := uint32(0); s < 0x200; s++ {
			if s&^m != 0 {
				continue
			}
			if s <= k {
				floor = s
			}
			if s >= k && !hasCeil {
				ceil, hasCeil = s, true
			}
		}
		if got := seccompFloorSub(k, m); got != floor {
			t.Fatalf("floor(%#x) = %#x, want %#x", k, got, floor)
		}
		got, ok := seccompCeilSub(k, m)
		if ok != hasCeil || ok && got != ceil {
			t.Fatalf("ceil(%#x) = %#x %v, want %#x %v", k, got, ok, ceil, hasCeil)
		}
	}
}

// A chain crafted to make the check itself take hours (thousands of
// argument tests on every syscall, eight filters of 4096 instructions) is
// refused as unverifiable within the check's step budget.
func TestSeccompCostBudget(t *testing.T) {
	a := seccompNewAsm(t)
	for i := 0; a.p == nil || len(a.p) < unix.BPF_MAXINSNS-4; i++ {
		a.ld(seccompOffArg(i%6, i%12 >= 6)).jmp(seccompJEQ, uint32(1000+i), "", "")
	}
	f := a.ld(seccompOffArg(0, false)).jmp(seccompJEQ, 0x1234, "", "deny").ret(seccompAllowRet).
		label("deny").ret(seccompEPERMRet).bytes()
	chain := [][]byte{f, f, f, f, f, f, f, f}
	done := make(chan error, 1)
	go func() { done <- CheckSeccomp(seccompDenySpec("mount"), chain) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrSeccompUnverifiable) {
			t.Fatalf("got %v, want ErrSeccompUnverifiable", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the check of a crafted chain runs past two minutes")
	}
}
