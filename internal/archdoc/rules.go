package main

import (
	"fmt"
	"sort"
	"strings"
)

// The house rules on imports, as data: TestHouseRules checks them against
// `go list`, and the document prints them from here, so that the prose
// cannot state a rule the code breaks.

// frontEnds are the packages (with their subpackages) that a caller talks
// to. They are peers: none imports another but through a crossing below.
var frontEnds = []string{"internal/cli", "internal/criuaction", "internal/installer", "internal/k8s/agent", "internal/k8s/controller", "internal/k8s/kubectlcryo", "internal/runcwrap", "internal/shim"}

// entries pick a front end by the name the binary was called by; they may
// import every front end.
var entries = []string{"cmd"}

// leaves import no cryo package but other leaves, so that any floor may
// use them.
var leaves = []string{"internal/config", "internal/failpoint", "internal/interrupt", "internal/procfs", "internal/progress", "internal/report", "internal/termtext", "internal/version"}

// crossing is an import from one front end into a small package of
// another, made to be shared.
type crossing struct{ from, to, why string }

var crossings = []crossing{
	{"internal/runcwrap", "internal/criuaction/hooks", "cryo-runc installs the CRIU action script into each bundle it creates"},
}

// gate is a capability that only some packages have: a package that
// imports one of the gate's packages (a path, or a path/... subtree) has it.
type gate struct {
	what    string
	imports []string
	only    []string
	note    string
}

var gates = []gate{
	{what: "may talk to containerd's API through its client or its services",
		imports: []string{"github.com/containerd/containerd/v2/client/...", "github.com/containerd/containerd/api/services/...",
			"github.com/containerd/containerd/v2/core/content/proxy"},
		only: []string{"internal/cli/ctrd", "internal/shim"},
		note: "the CLI through containerd's client; the shim is the other side, containerd calls it, and it dials containerd back for the containers, content, images, snapshots, introspection and version services (`internal/shim/legacy.go`, `internal/shim/runnable.go`)"},
	{what: "may run a CRIU dump or restore over CRIU's RPC (`criu swrk`)",
		imports: []string{"github.com/checkpoint-restore/go-criu/v7", "github.com/checkpoint-restore/go-criu/v7/rpc"},
		only:    []string{"internal/criu"},
		note:    "runc runs CRIU itself for the shim and cryo-runc; `internal/doctor` runs `criu check` and `criu --version` to diagnose a host"},
}

// under reports whether rel is dir or inside it.
func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

func underAny(rel string, dirs []string) bool {
	for _, d := range dirs {
		if under(rel, d) {
			return true
		}
	}
	return false
}

// frontEnd is the front end rel belongs to, or "".
func frontEnd(rel string) string {
	for _, f := range frontEnds {
		if under(rel, f) {
			return f
		}
	}
	return ""
}

func isLeaf(rel string) bool {
	for _, l := range leaves {
		if rel == l {
			return true
		}
	}
	return false
}

// importProblem says which rule the import from → to breaks, or "".
func importProblem(from, to string) string {
	if underAny(from, entries) {
		return ""
	}
	ff, ft := frontEnd(from), frontEnd(to)
	switch {
	case ft != "" && ff == "":
		return fmt.Sprintf("the core may not import a front end (%s)", ft)
	case ft != "" && ff != ft && !crossed(from, to):
		return fmt.Sprintf("front end %s may not import front end %s (the crossings allowed: %s)", ff, ft, crossingList())
	case isLeaf(from) && !isLeaf(to):
		return "a leaf imports only other leaves"
	}
	return ""
}

func crossed(from, to string) bool {
	for _, c := range crossings {
		if under(from, c.from) && to == c.to {
			return true
		}
	}
	return false
}

func crossingList() string {
	var s []string
	for _, c := range crossings {
		s = append(s, c.from+" → "+c.to)
	}
	return strings.Join(s, ", ")
}

// gated reports whether imp is one of the packages that give the gate.
func (gt gate) gated(imp string) bool {
	for _, p := range gt.imports {
		if sub, ok := strings.CutSuffix(p, "/..."); ok && (imp == sub || strings.HasPrefix(imp, sub+"/")) || imp == p {
			return true
		}
	}
	return false
}

// violations lists every import that breaks a house rule, naming it.
func violations(g *graph) []string {
	var out []string
	for _, p := range g.sorted() {
		from := g.rel(p)
		for _, imp := range g.edges[p] {
			if why := importProblem(from, g.rel(imp)); why != "" {
				out = append(out, fmt.Sprintf("%s imports %s: %s", from, g.rel(imp), why))
			}
		}
		for _, imp := range g.pkgs[p].Imports {
			for _, gt := range gates {
				if gt.gated(imp) && !underAny(from, gt.only) {
					out = append(out, fmt.Sprintf("%s imports %s: only %s %s", from, imp, strings.Join(gt.only, " and "), gt.what))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// rulesText is the rules as the document prints them.
func rulesText() string {
	var b strings.Builder
	q := func(ps []string) string { return "`" + strings.Join(ps, "`, `") + "`" }
	fmt.Fprintf(&b, "- The front ends are %s, each with its subpackages. None imports another,\n", q(frontEnds))
	b.WriteString("  except through these crossings into a small package made to be shared:\n")
	for _, c := range crossings {
		fmt.Fprintf(&b, "  - `%s` → `%s`: %s.\n", c.from, c.to, c.why)
	}
	fmt.Fprintf(&b, "- %s picks a front end and may import any. Every other package is the core, which\n  imports no front end.\n", q(entries))
	fmt.Fprintf(&b, "- %s are leaves: they import no cryo package but each other, and any floor may use them.\n", q(leaves))
	for _, gt := range gates {
		fmt.Fprintf(&b, "- Only %s %s, which a package does by importing %s: %s.\n", q(gt.only), gt.what, q(gt.imports), gt.note)
	}
	b.WriteString(bansText())
	b.WriteString(sizesText())
	return b.String()
}
