package main

import (
	"fmt"
	"sort"
	"strings"
)

// graph is the module's own import graph: package → the module's packages
// it imports (non-test imports; third-party packages left out).
type graph struct {
	module string
	pkgs   map[string]*pkg
	edges  map[string][]string
}

func newGraph(module string, pkgs []*pkg) *graph {
	g := &graph{module: module, pkgs: map[string]*pkg{}, edges: map[string][]string{}}
	for _, p := range pkgs {
		g.pkgs[p.ImportPath] = p
	}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			if _, own := g.pkgs[imp]; own {
				g.edges[p.ImportPath] = append(g.edges[p.ImportPath], imp)
			}
		}
		sort.Strings(g.edges[p.ImportPath])
	}
	return g
}

// floors puts each package one floor above the highest package it imports
// (floor 0: imports nothing of cryo). Every edge then goes down a floor or
// more, which is what "no edge back up" means; an import cycle has no
// floors and is refused, naming the cycle.
func (g *graph) floors() (map[string]int, error) {
	floor := map[string]int{}
	const visiting = -1
	var visit func(p string, path []string) error
	visit = func(p string, path []string) error {
		switch f, seen := floor[p]; {
		case seen && f == visiting:
			return fmt.Errorf("import cycle: %s", strings.Join(append(cycleFrom(path, p), p), " → "))
		case seen:
			return nil
		}
		floor[p] = visiting
		top := 0
		for _, imp := range g.edges[p] {
			if err := visit(imp, append(path, p)); err != nil {
				return err
			}
			top = max(top, floor[imp]+1)
		}
		floor[p] = top
		return nil
	}
	for _, p := range g.sorted() {
		if err := visit(p, nil); err != nil {
			return nil, err
		}
	}
	return floor, nil
}

// cycleFrom is the part of path that starts at p.
func cycleFrom(path []string, p string) []string {
	for i, q := range path {
		if q == p {
			return path[i:]
		}
	}
	return path
}

// sorted lists the packages by import path.
func (g *graph) sorted() []string {
	var out []string
	for p := range g.pkgs {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// byFloor lists the packages top floor first, by path within a floor.
func (g *graph) byFloor(floor map[string]int) []string {
	out := g.sorted()
	sort.SliceStable(out, func(i, j int) bool { return floor[out[i]] > floor[out[j]] })
	return out
}

func (g *graph) rel(p string) string { return g.pkgs[p].rel(g.module) }
