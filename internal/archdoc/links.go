package main

import (
	"fmt"
	"strings"
)

// A ban is a module tree that a binary may not link, even indirectly: the
// import rules above see only direct imports, and a library reached
// through any chain of them costs the binary's size and its package init
// all the same.
type ban struct {
	binary string   // the main package, as cmd/cryo
	trees  []string // path prefixes, each a package and its subpackages
	why    string
}

var bans = []ban{
	{binary: "cmd/cryo",
		trees: []string{"k8s.io/client-go", "k8s.io/apimachinery", "k8s.io/api", "sigs.k8s.io/controller-runtime"},
		why: "cryo is exec'd on the checkpoint and restore path (the shim, each CRIU action, each driver call), and a " +
			"Kubernetes client doubles its size and adds its schemes' init to every exec; the Kubernetes front ends are " +
			"`cmd/cryo-k8s`"},
}

// banned lists the packages of deps (a binary's `go list -deps`) that b
// forbids.
func (b ban) banned(deps []string) []string {
	var out []string
	for _, d := range deps {
		for _, t := range b.trees {
			if d == t || strings.HasPrefix(d, t+"/") {
				out = append(out, d)
			}
		}
	}
	return out
}

// linkViolations checks every ban against the binaries' dependencies, as
// depsOf lists them.
func linkViolations(module string, depsOf func(main string) ([]string, error)) ([]string, error) {
	var out []string
	for _, b := range bans {
		deps, err := depsOf(module + "/" + b.binary)
		if err != nil {
			return nil, err
		}
		for _, d := range b.banned(deps) {
			out = append(out, fmt.Sprintf("%s links %s: %s may not link %s", b.binary, d, b.binary, strings.Join(b.trees, ", ")))
		}
	}
	return out, nil
}

// goDeps is `go list -deps` of one main package, on the platform
// loadPackages pins.
func goDeps(root string) func(string) ([]string, error) {
	return func(main string) ([]string, error) {
		out, err := goCmd(root, "list", "-deps", "-f", "{{.ImportPath}}", main)
		if err != nil {
			return nil, err
		}
		return strings.Fields(string(out)), nil
	}
}

// bansText is the bans as the document prints them.
func bansText() string {
	var b strings.Builder
	for _, bn := range bans {
		fmt.Fprintf(&b, "- `%s` links nothing of `%s`, even indirectly: %s.\n", bn.binary, strings.Join(bn.trees, "`, `"), bn.why)
	}
	return b.String()
}
