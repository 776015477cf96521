package outcome

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// status checks one thread's credentials, capabilities, no_new_privs and
// seccomp mode, as the kernel reports them in its status file.
func (c *checker) status(t taskRef) error {
	st, err := readStatus(t.file("status"))
	if err != nil {
		return err
	}
	if c.w.Tracer != 0 && st["TracerPid"] != strconv.Itoa(c.w.Tracer) {
		return fmt.Errorf("outcome: %s is traced by %q, not by CRIU (%d): it may be running, and cannot be vouched for", t.label(), st["TracerPid"], c.w.Tracer)
	}
	for _, f := range []func(taskRef, map[string]string) error{c.ids, c.caps, c.privs} {
		if err := f(t, st); err != nil {
			return err
		}
	}
	return nil
}

func readStatus(path string) (map[string]string, error) {
	data, err := readProc(path)
	if err != nil {
		return nil, err
	}
	st := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	return st, nil
}

// ids checks the four uids, the four gids and the groups. /proc reports
// them as the host sees them, so the spec's ids are mapped through its
// user namespace's mappings first.
func (c *checker) ids(t taskRef, st map[string]string) error {
	sp := c.w.Spec
	if err := checkIDs(t, "uid", st["Uid"], c.g.uid, c.g.setuid, sp.Linux, true); err != nil {
		return err
	}
	if err := checkIDs(t, "gid", st["Gid"], c.g.gid, c.g.setgid, sp.Linux, false); err != nil {
		return err
	}
	if c.g.setgid {
		return nil
	}
	for _, f := range strings.Fields(st["Groups"]) {
		n, _ := strconv.ParseUint(f, 10, 32)
		ok := false
		for _, g := range c.g.groups {
			if host, mapped := hostID(sp.Linux, g, false); mapped && uint64(host) == n {
				ok = true
			}
		}
		if !ok {
			return violation(t, "supplementary groups", st["Groups"], fmt.Sprintf("groups %v, without CAP_SETGID", c.g.groups))
		}
	}
	return nil
}

var idFields = map[bool][]string{true: {"uid", "euid", "suid", "fsuid"}, false: {"gid", "egid", "sgid", "fsgid"}}

func checkIDs(t taskRef, kind, line string, want uint32, canChange bool, l *specs.Linux, uid bool) error {
	f := strings.Fields(line)
	if len(f) != 4 {
		return fmt.Errorf("outcome: %s: no %s line in its status", t.label(), kind)
	}
	host, mapped := hostID(l, want, uid)
	for i, v := range f {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return fmt.Errorf("outcome: %s: %s %q: %w", t.label(), kind, v, err)
		}
		if canChange && inUserNS(l, uint32(n), uid) {
			continue
		}
		if !mapped || uint64(host) != n {
			spec := fmt.Sprintf("%s %d, without CAP_SET%s", kind, want, strings.ToUpper(kind))
			if canChange {
				spec = "only the ids its user namespace maps"
			}
			return violation(t, idFields[uid][i], v, spec)
		}
	}
	return nil
}

// hostID maps a container id to the host's through the spec's mappings
// (the identity without a user namespace); false when it is unmapped.
func hostID(l *specs.Linux, id uint32, uid bool) (uint32, bool) {
	m := mappings(l, uid)
	if m == nil {
		return id, true
	}
	for _, e := range m {
		if id >= e.ContainerID && id-e.ContainerID < e.Size {
			return e.HostID + id - e.ContainerID, true
		}
	}
	return 0, false
}

// inUserNS is whether host id n is one the container's ids map to: a task
// that may change its ids may take any of them, and none other.
func inUserNS(l *specs.Linux, n uint32, uid bool) bool {
	m := mappings(l, uid)
	if m == nil {
		return true
	}
	return slices.ContainsFunc(m, func(e specs.LinuxIDMapping) bool { return n >= e.HostID && n-e.HostID < e.Size })
}

func mappings(l *specs.Linux, uid bool) []specs.LinuxIDMapping {
	if l == nil || !slices.ContainsFunc(l.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace }) {
		return nil
	}
	if uid {
		return l.UIDMappings
	}
	return l.GIDMappings
}

// caps checks each capability set against what the spec's sets let a
// process reach (granted).
func (c *checker) caps(t taskRef, st map[string]string) error {
	sets := []struct {
		key, name string
		max       capSet
	}{
		{"CapBnd", "capabilities (bounding)", c.g.bnd}, {"CapPrm", "capabilities (permitted)", c.g.prm},
		{"CapEff", "capabilities (effective)", c.g.eff}, {"CapInh", "capabilities (inheritable)", c.g.inh},
		{"CapAmb", "capabilities (ambient)", c.g.amb},
	}
	for _, s := range sets {
		v, err := strconv.ParseUint(st[s.key], 16, 64)
		if err != nil {
			return fmt.Errorf("outcome: %s: %s %q: %w", t.label(), s.key, st[s.key], err)
		}
		if extra := capSet(v) &^ s.max; extra != 0 {
			return violation(t, s.name, capSet(v).String(), s.max.String()+" (it holds "+extra.String()+" more)")
		}
	}
	return nil
}

// privs checks no_new_privs and the seccomp mode and filter count; the
// filters' bodies are checked apart (filters), from what CRIU fetched.
func (c *checker) privs(t taskRef, st map[string]string) error {
	sp := c.w.Spec
	if sp.Process != nil && sp.Process.NoNewPrivileges && st["NoNewPrivs"] != "1" {
		return violation(t, "no_new_privs", "not set", "no_new_privs set")
	}
	if sp.Linux == nil || sp.Linux.Seccomp == nil {
		return nil
	}
	n, _ := strconv.Atoi(st["Seccomp_filters"])
	if st["Seccomp"] != "2" || n < 1 {
		got := fmt.Sprintf("mode %s with %d filter(s)", st["Seccomp"], n)
		return violation(t, "seccomp", got, "the spec's filter (mode 2, at least 1 filter)")
	}
	// The chain CRIU fetched must be the one the kernel counts: a chain
	// with a filter left out would be checked as weaker than it is, or
	// stronger.
	if chain, ok := c.w.Filters[t.tid]; c.w.Filters != nil && (!ok || len(chain) != n) {
		return fmt.Errorf("outcome: %s: the kernel reports %d seccomp filter(s), CRIU wrote %d: %w", t.label(), n, len(chain), ErrNoFilters)
	}
	return nil
}
