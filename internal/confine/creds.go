package confine

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/creds"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
)

// capSet is a capability bit set.
type capSet uint64

// capNumbers maps the spec's capability names to the kernel's numbers.
var capNumbers = map[string]uint{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"CAP_FOWNER": unix.CAP_FOWNER, "CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID,
	"CAP_SETUID": unix.CAP_SETUID, "CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_LINUX_IMMUTABLE": unix.CAP_LINUX_IMMUTABLE,
	"CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "CAP_NET_BROADCAST": unix.CAP_NET_BROADCAST, "CAP_NET_ADMIN": unix.CAP_NET_ADMIN,
	"CAP_NET_RAW": unix.CAP_NET_RAW, "CAP_IPC_LOCK": unix.CAP_IPC_LOCK, "CAP_IPC_OWNER": unix.CAP_IPC_OWNER,
	"CAP_SYS_MODULE": unix.CAP_SYS_MODULE, "CAP_SYS_RAWIO": unix.CAP_SYS_RAWIO, "CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT,
	"CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE, "CAP_SYS_PACCT": unix.CAP_SYS_PACCT, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN,
	"CAP_SYS_BOOT": unix.CAP_SYS_BOOT, "CAP_SYS_NICE": unix.CAP_SYS_NICE, "CAP_SYS_RESOURCE": unix.CAP_SYS_RESOURCE,
	"CAP_SYS_TIME": unix.CAP_SYS_TIME, "CAP_SYS_TTY_CONFIG": unix.CAP_SYS_TTY_CONFIG, "CAP_MKNOD": unix.CAP_MKNOD,
	"CAP_LEASE": unix.CAP_LEASE, "CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE, "CAP_AUDIT_CONTROL": unix.CAP_AUDIT_CONTROL,
	"CAP_SETFCAP": unix.CAP_SETFCAP, "CAP_MAC_OVERRIDE": unix.CAP_MAC_OVERRIDE, "CAP_MAC_ADMIN": unix.CAP_MAC_ADMIN,
	"CAP_SYSLOG": unix.CAP_SYSLOG, "CAP_WAKE_ALARM": unix.CAP_WAKE_ALARM, "CAP_BLOCK_SUSPEND": unix.CAP_BLOCK_SUSPEND,
	"CAP_AUDIT_READ": unix.CAP_AUDIT_READ, "CAP_PERFMON": unix.CAP_PERFMON, "CAP_BPF": unix.CAP_BPF,
	"CAP_CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE,
}

// specCaps is a spec capability list as a set. A name the kernel does not
// know grants nothing.
func specCaps(names []string) capSet {
	var s capSet
	for _, n := range names {
		if c, ok := capNumbers[strings.ToUpper(n)]; ok {
			s |= 1 << c
		}
	}
	return s
}

// imageCaps is CRIU's capability words (32 bits each, lowest first).
func imageCaps(words []uint32) capSet {
	var s capSet
	for i, w := range words {
		if i < 2 {
			s |= capSet(w) << (32 * i)
		}
	}
	return s
}

func (s capSet) has(c uint) bool { return s&(1<<c) != 0 }

// String names the capabilities, as the spec does.
func (s capSet) String() string {
	if s == 0 {
		return "none"
	}
	var names []string
	for n, c := range capNumbers {
		if s.has(c) {
			names = append(names, n)
		}
	}
	if extra := bits.OnesCount64(uint64(s)) - len(names); extra > 0 {
		names = append(names, fmt.Sprintf("%d unnamed", extra))
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// granted is what a process started from the spec may hold: the spec's
// sets, and what the capability rules let it reach from them.
type granted struct {
	uid, gid       uint32
	groups         []uint32
	bnd, prm, inh  capSet
	eff, amb       capSet
	noNewPrivs     bool
	setuid, setgid bool // the spec's permitted set lets it change identity
}

func grantedBy(spec *specs.Spec) granted {
	var g granted
	p := spec.Process
	if p == nil {
		return g
	}
	g.uid, g.gid, g.noNewPrivs = p.User.UID, p.User.GID, p.NoNewPrivileges
	g.groups = append([]uint32{p.User.GID}, p.User.AdditionalGids...)
	if c := p.Capabilities; c != nil {
		g.bnd, g.prm, g.inh = specCaps(c.Bounding), specCaps(c.Permitted), specCaps(c.Inheritable)
		g.amb = specCaps(c.Ambient)
	}
	// A process may raise its effective set to its permitted set, add to
	// its inheritable set what it holds in permitted (anything in the
	// bounding set with CAP_SETPCAP), and raise ambient what is both
	// permitted and inheritable (capabilities(7)).
	g.eff = g.prm
	if g.prm.has(unix.CAP_SETPCAP) {
		g.inh |= g.bnd
	}
	g.inh |= g.prm
	g.amb |= g.prm & g.inh
	g.setuid, g.setgid = g.prm.has(unix.CAP_SETUID), g.prm.has(unix.CAP_SETGID)
	return g
}

// checkCreds checks every thread's credentials against the spec.
func checkCreds(im *image, spec *specs.Spec) error {
	g := grantedBy(spec)
	for _, t := range im.tasks {
		c := t.core.GetThreadCore().GetCreds()
		if c == nil {
			return &imageError{file: fmt.Sprintf("core-%d.img", t.tid), reason: "it records no credentials"}
		}
		if err := g.checkIDs(t, c); err != nil {
			return err
		}
		if err := g.checkCaps(t, c); err != nil {
			return err
		}
		if err := g.checkPrivs(t, c); err != nil {
			return err
		}
	}
	return nil
}

func (g granted) checkIDs(t task, c *creds.CredsEntry) error {
	uids := map[string]uint32{"uid": c.GetUid(), "euid": c.GetEuid(), "suid": c.GetSuid(), "fsuid": c.GetFsuid()}
	gids := map[string]uint32{"gid": c.GetGid(), "egid": c.GetEgid(), "sgid": c.GetSgid(), "fsgid": c.GetFsgid()}
	for _, f := range []string{"uid", "euid", "suid", "fsuid"} {
		if uids[f] != g.uid && !g.setuid {
			return &Violation{Task: t.label(), Field: f, Image: fmt.Sprint(uids[f]), Spec: fmt.Sprintf("uid %d, without CAP_SETUID", g.uid)}
		}
	}
	for _, f := range []string{"gid", "egid", "sgid", "fsgid"} {
		if gids[f] != g.gid && !g.setgid {
			return &Violation{Task: t.label(), Field: f, Image: fmt.Sprint(gids[f]), Spec: fmt.Sprintf("gid %d, without CAP_SETGID", g.gid)}
		}
	}
	for _, grp := range c.GetGroups() {
		if !slices.Contains(g.groups, grp) && !g.setgid {
			return &Violation{Task: t.label(), Field: "supplementary groups", Image: fmt.Sprint(c.GetGroups()),
				Spec: fmt.Sprintf("groups %v, without CAP_SETGID", g.groups)}
		}
	}
	return nil
}

func (g granted) checkCaps(t task, c *creds.CredsEntry) error {
	amb, _ := credsExtra(c)
	sets := []struct {
		name       string
		image, max capSet
	}{
		{"bounding", imageCaps(c.GetCapBnd()), g.bnd},
		{"permitted", imageCaps(c.GetCapPrm()), g.prm},
		{"effective", imageCaps(c.GetCapEff()), g.eff},
		{"inheritable", imageCaps(c.GetCapInh()), g.inh},
		{"ambient", imageCaps(amb), g.amb},
	}
	for _, s := range sets {
		if extra := s.image &^ s.max; extra != 0 {
			return &Violation{Task: t.label(), Field: "capabilities (" + s.name + ")", Image: s.image.String(),
				Spec: s.max.String() + fmt.Sprintf(" (the checkpoint has %s more)", extra)}
		}
	}
	return nil
}

// The securebits a process can only set with CAP_SETPCAP and that let it
// keep capabilities across a change of identity. The others (and all the
// locks) only take rights away.
// (SECURE_NO_SETUID_FIXUP is bit 2, SECURE_KEEP_CAPS bit 4; securebits.h.)
const keepCapsBits = 1<<2 | 1<<4

func (g granted) checkPrivs(t task, c *creds.CredsEntry) error {
	if bits := c.GetSecbits() & keepCapsBits; bits != 0 && !g.prm.has(unix.CAP_SETPCAP) {
		return &Violation{Task: t.label(), Field: "securebits", Image: fmt.Sprintf("%#x (keep capabilities across setuid)", c.GetSecbits()),
			Spec: "no securebits (its permitted set lacks CAP_SETPCAP)"}
	}
	_, nnp := credsExtra(c)
	if g.noNewPrivs && (nnp == nil || *nnp == 0) {
		// CRIU 4.2 records the flag only when it is set; older ones never.
		val := "not set"
		if nnp == nil {
			val = "not set (or not recorded: CRIU before 4.2 does not)"
		}
		return &Violation{Task: t.label(), Field: "no_new_privs", Image: val, Spec: "no_new_privs set (noNewPrivileges: true)"}
	}
	return nil
}

// credsExtra reads the fields CRIU 4.2 added to creds_entry, which go-criu
// v7's generated code does not know: ambient capabilities (19) and
// no_new_privs (18). They arrive as unknown fields. nnp is nil when the
// image does not record it.
func credsExtra(c *creds.CredsEntry) (amb []uint32, nnp *uint32) {
	b := c.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return amb, nnp
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == 18 || num == 19) {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return amb, nnp
			}
			b = b[m:]
			if num == 18 {
				x := uint32(v)
				nnp = &x
			} else {
				amb = append(amb, uint32(v))
			}
			continue
		}
		if typ == protowire.BytesType && num == 19 { // packed
			data, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return amb, nnp
			}
			b = b[m:]
			for len(data) > 0 {
				v, k := protowire.ConsumeVarint(data)
				if k < 0 {
					break
				}
				amb, data = append(amb, uint32(v)), data[k:]
			}
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return amb, nnp
		}
		b = b[m:]
	}
	return amb, nnp
}
