package doctor

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// The names containerd knows cryo by (shim.RuntimeName, shim.BinaryName;
// repeated here so that the doctor does not link the shim's server).
const (
	runtimeType = "io.containerd.cryo.v2"
	shimBinary  = "containerd-shim-cryo-v2"
)

const noContainerd = "containerd not installed (not running, not on PATH)"

// checkContainerd checks the shim containerd would start and the CRI
// runtime entry of each running daemon, or of the installed containerd's
// default configuration when none runs.
func (e *env) checkContainerd(ctx context.Context, c containerdHost) []Check {
	if c.missing != "" {
		return []Check{e.notAtAddress("containerd shim", c), e.notAtAddress("containerd cri", c)}
	}
	if !c.found() {
		return []Check{
			{Name: "containerd shim", Status: Skip, Detail: noContainerd},
			{Name: "containerd cri", Status: Skip, Detail: noContainerd},
		}
	}
	if len(c.daemons) == 0 {
		d := daemon{exe: c.binary, config: e.host.ContainerdConfig}
		return []Check{e.checkShim(ctx, d, false), e.checkCRI(ctx, d, false)}
	}
	var res []Check
	for _, d := range c.daemons {
		res = append(res, e.checkShim(ctx, d, true), e.checkCRI(ctx, d, true))
	}
	return res
}

// shimDirs are where containerd looks for its shim, in its order: its own
// PATH, then its binary's directory. When its PATH is unknown (no daemon,
// or its environment unreadable), this PATH and the usual install
// directories stand in.
func (e *env) shimDirs(d daemon) []string {
	var dirs []string
	if d.pathKnown {
		dirs = filepath.SplitList(d.path)
	} else {
		dirs = append(filepath.SplitList(e.host.PATH), e.host.ShimDirs...)
	}
	if d.exe != "" {
		dirs = append(dirs, filepath.Dir(d.exe))
	}
	return dirs
}

// who names the daemon a line is about.
func (d daemon) who(running bool) string {
	if running {
		return fmt.Sprintf("containerd (pid %d)", d.pid)
	}
	return "containerd (" + d.exe + ", not running)"
}

// checkShim: ctr and the Go client need no configuration for cryo, only
// the shim on containerd's search path. Without it, or with another build
// of cryo there, the containerd front end is not set up: a warning, since
// the other front ends work.
func (e *env) checkShim(ctx context.Context, d daemon, running bool) Check {
	found := lookIn(e.shimDirs(d), shimBinary)
	fix := "ln -s " + e.self + " /usr/local/bin/" + shimBinary + " (a directory on containerd's PATH)"
	if len(found) == 0 {
		detail := shimBinary + " not found by " + d.who(running)
		if elsewhere := lookIn(e.host.ShimDirs, shimBinary); len(elsewhere) > 0 {
			detail += "; " + elsewhere[0] + " exists but is not on containerd's PATH (" + d.path + ") nor next to its binary"
			fix = "ln -s " + e.self + " " + filepath.Join(filepath.Dir(d.exe), shimBinary) + ", or add its directory to containerd's PATH"
		}
		return Check{"containerd shim", Warn, detail + ": `ctr run --runtime " + runtimeType + "` fails", fix}
	}
	what, ours := e.identify(ctx, found[0], "-v")
	if !ours {
		return Check{"containerd shim", Warn, d.who(running) + " starts " + what, "ln -sf " + e.self + " " + found[0]}
	}
	return Check{Name: "containerd shim", Status: OK, Detail: d.who(running) + " starts " + what}
}

// checkCRI: the Kubernetes node side. The kubelet's RuntimeClass "cryo"
// needs a CRI runtime entry of type io.containerd.cryo.v2 whose
// pod_annotations pass cryo.io/* (a pod's checkpoint image) to the shim.
func (e *env) checkCRI(ctx context.Context, d daemon, running bool) Check {
	cfg, err := loadContainerdConfig(ctx, d.exe, d.config)
	if err != nil {
		return Check{"containerd cri", Warn, d.who(running) + ": " + err.Error(), "fix " + d.config + " until `containerd --config " + d.config + " config dump` accepts it"}
	}
	if cfg.criDisabled() {
		return Check{Name: "containerd cri", Status: Skip, Detail: d.who(running) + ": the CRI plugin is disabled (" + cfg.source + "): Kubernetes does not use this containerd"}
	}
	entries := cfg.cryoRuntimes()
	snippet := "add the containerd " + cfg.line() + " runtime from contrib/kubernetes/containerd-cri.toml to " + d.config + ", then restart containerd"
	if len(entries) == 0 {
		return Check{"containerd cri", Warn, d.who(running) + ": no CRI runtime of type " + runtimeType + " in " + cfg.source + ": pods of RuntimeClass cryo cannot start", snippet}
	}
	for _, r := range entries {
		if c, bad := e.checkCRIEntry(ctx, d, running, cfg, r); bad {
			return c
		}
	}
	return Check{Name: "containerd cri", Status: OK, Detail: d.who(running) + ": runtime handler " + quoteAll(runtimeNames(entries)) +
		" (" + cfg.source + "), pod_annotations pass cryo.io/*; the RuntimeClass itself is in the API server (see kubernetes)"}
}

// checkCRIEntry checks one runtime handler: its runtime_path, if set, is
// the shim CRI starts, and its pod_annotations must pass cryo's.
func (e *env) checkCRIEntry(ctx context.Context, d daemon, running bool, cfg containerdConfig, r criRuntime) (Check, bool) {
	where := d.who(running) + ": runtime handler " + quote(r.name) + " (" + cfg.source + ")"
	if r.path == "" && len(lookIn(e.shimDirs(d), shimBinary)) == 0 {
		return Check{"containerd cri", Fail, where + ": containerd finds no " + shimBinary + ": its pods fail to start",
			"ln -s " + e.self + " /usr/local/bin/" + shimBinary + " (see containerd shim)"}, true
	}
	if r.path != "" {
		if !isExecutable(r.path) {
			return Check{"containerd cri", Fail, where + ": runtime_path " + r.path + " is not an executable file: its pods fail to start",
				"ln -s " + e.self + " " + r.path + ", or remove runtime_path"}, true
		}
		if what, ours := e.identify(ctx, r.path, "-v"); !ours {
			return Check{"containerd cri", Warn, where + ": runtime_path is " + what, "ln -sf " + e.self + " " + r.path}, true
		}
	}
	if missing := missingAnnotations(r.podAnnotations); len(missing) > 0 {
		return Check{"containerd cri", Warn, where + ": pod_annotations " + fmt.Sprint(r.podAnnotations) + " do not pass " + strings.Join(missing, ", ") +
			": pods cannot start from a checkpoint image",
			`add pod_annotations = ["cryo.io/*"] to that runtime (contrib/kubernetes/containerd-cri.toml), then restart containerd`}, true
	}
	return Check{}, false
}

// checkKubernetes: the RuntimeClass is an API object, not a node's file.
func checkKubernetes() Check {
	return Check{Name: "kubernetes", Status: Skip, Detail: "the RuntimeClass \"cryo\" (contrib/kubernetes/runtimeclass.yaml) lives in the API server, not on this node: check it with `kubectl get runtimeclass cryo`; the node's side is containerd cri"}
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = quote(n)
	}
	return strings.Join(q, ", ")
}

// notAtAddress is a containerd check for an --address that no running
// containerd listens on.
func (e *env) notAtAddress(name string, c containerdHost) Check {
	return Check{name, Warn, "no running containerd listens on " + e.address + " (" + c.missing + ")",
		"pass the --address of a running containerd (or unset CONTAINERD_ADDRESS to check them all)"}
}
