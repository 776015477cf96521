package confine

import (
	"bytes"
	"errors"
	"testing"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/seccomp"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// seccompFilter is a seccomp.img entry; prev < 0 is none.
func seccompFilter(data []byte, prev int, flags uint32) *seccomp.SeccompFilter {
	f := &seccomp.SeccompFilter{Filter: data, Flags: proto.Uint32(flags)}
	if prev >= 0 {
		f.Prev = proto.Uint32(uint32(prev))
	}
	return f
}

// seccompProgs are distinct one-instruction filters.
func seccompProgs(t *testing.T, n int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, seccompNewAsm(t).ret(unix.SECCOMP_RET_ERRNO|uint32(i)).bytes())
	}
	return out
}

// As CRIU writes seccomp.img: each thread's filters oldest first, each
// newer one pointing at the one before; a thread names its newest.
func TestSeccompChainFollowsPrev(t *testing.T) {
	p := seccompProgs(t, 4)
	filters := []*seccomp.SeccompFilter{
		seccompFilter(p[0], -1, 0), seccompFilter(p[1], 0, unix.SECCOMP_FILTER_FLAG_TSYNC),
		seccompFilter(p[2], -1, unix.SECCOMP_FILTER_FLAG_LOG), seccompFilter(p[3], 2, 0),
	}
	for index, want := range map[uint32][][]byte{0: {p[0]}, 1: {p[1], p[0]}, 3: {p[3], p[2]}} {
		got, err := SeccompChain(filters, index)
		if err != nil || len(got) != len(want) {
			t.Fatalf("index %d: %d filters, %v; want %d", index, len(got), err, len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("index %d: filter %d differs", index, i)
			}
		}
	}
}

// An edited seccomp.img cannot make CRIU loop, read past its filters, or
// ask seccomp(2) for flags that weaken the filter.
func TestSeccompChainRefusesEdits(t *testing.T) {
	p := seccompProgs(t, 2)
	for name, c := range map[string]struct {
		filters []*seccomp.SeccompFilter
		index   uint32
		want    error
	}{
		"index past the filters": {[]*seccomp.SeccompFilter{seccompFilter(p[0], -1, 0)}, 1, ErrSeccompMalformed},
		"prev past the filters":  {[]*seccomp.SeccompFilter{seccompFilter(p[0], 5, 0)}, 0, ErrSeccompMalformed},
		"prev to itself":         {[]*seccomp.SeccompFilter{seccompFilter(p[0], 0, 0)}, 0, ErrSeccompMalformed},
		"prev loop":              {[]*seccomp.SeccompFilter{seccompFilter(p[0], 1, 0), seccompFilter(p[1], 0, 0)}, 1, ErrSeccompMalformed},
		"partial instruction":    {[]*seccomp.SeccompFilter{seccompFilter(p[0][:5], -1, 0)}, 0, ErrSeccompMalformed},
		"SPEC_ALLOW":             {[]*seccomp.SeccompFilter{seccompFilter(p[0], -1, unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW)}, 0, ErrSeccompWeaker},
		"NEW_LISTENER":           {[]*seccomp.SeccompFilter{seccompFilter(p[0], -1, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)}, 0, ErrSeccompWeaker},
	} {
		if _, err := SeccompChain(c.filters, c.index); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
}

// seccompCore is a core image whose thread runs filter index in mode.
func seccompCore(mode criucore.SeccompMode, index uint32) *criucore.CoreEntry {
	return &criucore.CoreEntry{
		Tc:         &criucore.TaskCoreEntry{},
		ThreadCore: &criucore.ThreadCoreEntry{SeccompMode: mode.Enum(), SeccompFilter: proto.Uint32(index)},
	}
}

// CRIU lets the task core's old seccomp fields (from CRIU 3.x images)
// override a main thread's own: an image that shows a strict chain in
// thread_core but sets old_seccomp_mode to disabled is restored without a
// filter, and refused as such.
func TestSeccompThreadChainOldFields(t *testing.T) {
	spec := seccompRuntimeDefault()
	filters := []*seccomp.SeccompFilter{seccompFilter(seccompNewAsm(t).ret(seccompKillRet).bytes(), -1, 0)}
	core := seccompCore(criucore.SeccompMode_filter, 0)
	core.Tc.OldSeccompMode = criucore.SeccompMode_disabled.Enum()

	chain, err := SeccompThreadChain(filters, core, false)
	if err != nil || len(chain) != 1 {
		t.Fatalf("another thread keeps its own filter: %d filters, %v", len(chain), err)
	}
	seccompAccepted(t, CheckSeccomp(spec, chain))

	chain, err = SeccompThreadChain(filters, core, true)
	if err != nil || len(chain) != 0 {
		t.Fatalf("the main thread restores CRIU 3.x's mode: %d filters, %v", len(chain), err)
	}
	if err := CheckSeccomp(spec, chain); !errors.Is(err, ErrSeccompWeaker) {
		t.Errorf("no filter against the default profile: got %v, want ErrSeccompWeaker", err)
	}

	core.Tc.OldSeccompMode, core.Tc.OldSeccompFilter = criucore.SeccompMode_filter.Enum(), proto.Uint32(4)
	if _, err := SeccompThreadChain(filters, core, true); !errors.Is(err, ErrSeccompMalformed) {
		t.Errorf("old_seccomp_filter past the filters: got %v, want ErrSeccompMalformed", err)
	}
}

func TestSeccompThreadChainModes(t *testing.T) {
	chain, err := SeccompThreadChain(nil, seccompCore(criucore.SeccompMode_strict, 0), true)
	if err != nil || len(chain) != 1 || !bytes.Equal(chain[0], seccompStrict()) {
		t.Fatalf("strict mode: %d filters, %v", len(chain), err)
	}
	chain, err = SeccompThreadChain(nil, &criucore.CoreEntry{ThreadCore: &criucore.ThreadCoreEntry{}}, true)
	if err != nil || chain != nil {
		t.Fatalf("no mode recorded: %d filters, %v; want none", len(chain), err)
	}
	if _, err := SeccompThreadChain(nil, seccompCore(criucore.SeccompMode_filter, 0), true); !errors.Is(err, ErrSeccompMalformed) {
		t.Errorf("a filter without seccomp.img: got %v, want ErrSeccompMalformed", err)
	}
	if _, err := SeccompThreadChain(nil, seccompCore(7, 0), true); !errors.Is(err, ErrSeccompMalformed) {
		t.Errorf("mode 7: got %v, want ErrSeccompMalformed", err)
	}
	if _, err := SeccompThreadChain(nil, &criucore.CoreEntry{}, true); !errors.Is(err, ErrSeccompMalformed) {
		t.Errorf("no thread_core: got %v, want ErrSeccompMalformed", err)
	}
}
