package doctor

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/config"
)

// frontEnds are the container managers installed here.
type frontEnds struct {
	containerd containerdHost
	podman     string // the podman binary; "" if absent
}

// containerdHost is what runs and what is installed of containerd.
type containerdHost struct {
	daemons []daemon
	binary  string // a containerd binary: the first daemon's, else PATH's
	// missing is set when the --address asked for is none of the running
	// daemons': what runs instead ("pid 42 on /run/containerd/containerd.sock").
	missing string
}

func (c containerdHost) found() bool { return len(c.daemons) > 0 || c.binary != "" }

// daemon is one running containerd, as /proc shows it.
type daemon struct {
	pid    int
	exe    string
	config string // its --config, else the default file
	// address is the socket it listens on (daemonAddress).
	address string
	// path is the PATH containerd looks shims up in; pathKnown is false
	// when its environment could not be read (not root).
	path      string
	pathKnown bool
}

func (e *env) findFrontEnds() frontEnds {
	f := frontEnds{podman: e.look("podman")}
	all := findDaemons(e.host.Proc, e.host.ContainerdConfig)
	f.containerd.daemons = atAddress(all, e.address)
	if e.address != "" && len(f.containerd.daemons) == 0 {
		f.containerd.missing = describeDaemons(all)
	}
	if len(f.containerd.daemons) > 0 {
		f.containerd.binary = f.containerd.daemons[0].exe
	} else {
		f.containerd.binary = e.look("containerd")
	}
	return f
}

// findDaemons lists the running containerd processes, lowest pid first.
func findDaemons(proc, defaultConfig string) []daemon {
	entries, _ := os.ReadDir(proc)
	var ds []daemon
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(proc, ent.Name())
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "containerd" {
			continue
		}
		d := daemon{pid: pid, config: defaultConfig}
		d.exe, _ = os.Readlink(filepath.Join(dir, "exe"))
		d.exe = strings.TrimSuffix(d.exe, " (deleted)")
		args := readNul(filepath.Join(dir, "cmdline"))
		if c := configFlag(args); c != "" {
			d.config = c
		}
		d.address = daemonAddress(args, d.config)
		if environ := readNul(filepath.Join(dir, "environ")); environ != nil {
			d.path, d.pathKnown = config.Lookup(environ, "PATH"), true
		}
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].pid < ds[j].pid })
	return ds
}

// configFlag is the value of containerd's --config/-c in its arguments.
func configFlag(args []string) string {
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, "-config="); ok {
			return v
		}
		if v, ok := strings.CutPrefix(a, "-c="); ok {
			return v
		}
		if (a == "-config" || a == "-c") && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// readNul reads a NUL-separated /proc file; nil if unreadable.
func readNul(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, f := range bytes.Split(bytes.TrimRight(data, "\x00"), []byte{0}) {
		out = append(out, string(f))
	}
	return out
}

// describeDaemons names each daemon by pid and socket, for a --address
// that none of them listens on.
func describeDaemons(ds []daemon) string {
	if len(ds) == 0 {
		return "no containerd runs"
	}
	var parts []string
	for _, d := range ds {
		parts = append(parts, "pid "+strconv.Itoa(d.pid)+" on "+d.address)
	}
	return "running: " + strings.Join(parts, ", ")
}
