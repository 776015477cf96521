package outcome

import (
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// capSet is a capability bit set.
type capSet uint64

func (s capSet) has(c int) bool { return s&(1<<c) != 0 }

// String names the capabilities as the spec does.
func (s capSet) String() string {
	if s == 0 {
		return "none"
	}
	var names []string
	for c := 0; c < 64; c++ {
		if s.has(c) {
			if c <= unix.CAP_LAST_CAP {
				names = append(names, "CAP_"+strings.ToUpper(capNames[c]))
			} else {
				names = append(names, fmt.Sprintf("capability %d", c))
			}
		}
	}
	return strings.Join(names, ",")
}

// capNames are the kernel's capability names by number (capabilities(7)).
var capNames = strings.Fields(`chown dac_override dac_read_search fowner fsetid kill setgid setuid setpcap linux_immutable
	net_bind_service net_broadcast net_admin net_raw ipc_lock ipc_owner sys_module sys_rawio sys_chroot sys_ptrace sys_pacct
	sys_admin sys_boot sys_nice sys_resource sys_time sys_tty_config mknod lease audit_write audit_control setfcap
	mac_override mac_admin syslog wake_alarm block_suspend audit_read perfmon bpf checkpoint_restore`)

// specCaps is a spec capability list as a set; a name the kernel does not
// know grants nothing.
func specCaps(names []string) capSet {
	var s capSet
	for _, n := range names {
		if i := slices.Index(capNames, strings.ToLower(strings.TrimPrefix(strings.ToUpper(n), "CAP_"))); i >= 0 {
			s |= 1 << i
		}
	}
	return s
}

// granted is what a process started from the spec may hold, the rule of
// package confine's pre-check: the spec's sets, and what capabilities(7)
// lets a process reach from them (effective up to permitted, inheritable
// from permitted, or from bounding with CAP_SETPCAP, ambient from both).
type granted struct {
	uid, gid                uint32
	groups                  []uint32
	bnd, prm, inh, eff, amb capSet
	setuid, setgid          bool
}

func grantedBy(spec *specs.Spec) granted {
	var g granted
	p := spec.Process
	if p == nil {
		return g
	}
	g.uid, g.gid = p.User.UID, p.User.GID
	g.groups = append([]uint32{p.User.GID}, p.User.AdditionalGids...)
	if c := p.Capabilities; c != nil {
		g.bnd, g.prm, g.inh, g.amb = specCaps(c.Bounding), specCaps(c.Permitted), specCaps(c.Inheritable), specCaps(c.Ambient)
	}
	g.eff = g.prm
	if g.prm.has(unix.CAP_SETPCAP) {
		g.inh |= g.bnd
	}
	g.inh |= g.prm
	g.amb |= g.prm & g.inh
	g.setuid, g.setgid = g.prm.has(unix.CAP_SETUID), g.prm.has(unix.CAP_SETGID)
	return g
}
