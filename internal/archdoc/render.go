package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"text/template"
)

// tmpl is the hand-written part of the document: the prose, with the
// generated sections in {{.Packages}}, {{.Graph}}, {{.Imports}},
// {{.Rules}} and {{.Environment}}.
//
//go:embed architecture.md.tmpl
var tmpl string

// sections are the generated parts of the document.
type sections struct {
	Packages    string // floor, package and job, top floor first
	Graph       string // the Mermaid graph, one subgraph per floor
	Imports     string // package → cryo's packages it imports
	Environment string // who reads the process environment itself
	Rules       string // the house rules (rules.go, links.go, sizes.go)
	Floors      int    // how many floors there are
}

// generate builds the document from the module the working directory is
// in. warnings name package doc comments that are missing or name another
// package; they do not stop the document.
func generate() ([]byte, []string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, nil, err
	}
	module, pkgs, err := loadPackages(root)
	if err != nil {
		return nil, nil, err
	}
	g := newGraph(module, pkgs)
	floor, err := g.floors()
	if err != nil {
		return nil, nil, err
	}
	s := sections{Packages: packagesTable(g, floor), Graph: mermaid(g, floor), Imports: importsTable(g, floor), Rules: rulesText()}
	for _, f := range floor {
		s.Floors = max(s.Floors, f+1)
	}
	if s.Environment, err = environmentTable(g, floor); err != nil {
		return nil, nil, err
	}
	var out bytes.Buffer
	t := template.Must(template.New("architecture.md").Option("missingkey=error").Parse(tmpl))
	if err := t.Execute(&out, s); err != nil {
		return nil, nil, err
	}
	return out.Bytes(), docWarnings(g), nil
}

func packagesTable(g *graph, floor map[string]int) string {
	var b strings.Builder
	b.WriteString("| floor | package | its job (the package's doc comment) |\n|---|---|---|\n")
	for _, p := range g.byFloor(floor) {
		fmt.Fprintf(&b, "| %d | `%s` | %s |\n", floor[p], g.rel(p), cell(job(g.pkgs[p])))
	}
	return b.String()
}

func importsTable(g *graph, floor map[string]int) string {
	var b strings.Builder
	b.WriteString("| package | imports (cryo's packages, with their floor) |\n|---|---|\n")
	for _, p := range g.byFloor(floor) {
		var imps []string
		for _, imp := range g.edges[p] {
			imps = append(imps, fmt.Sprintf("`%s` (%d)", g.rel(imp), floor[imp]))
		}
		fmt.Fprintf(&b, "| `%s` (%d) | %s |\n", g.rel(p), floor[p], cell(strings.Join(imps, ", ")))
	}
	return b.String()
}

// mermaid draws every edge, importer above import, with one subgraph per
// floor so that the floors show in the picture too.
func mermaid(g *graph, floor map[string]int) string {
	var b strings.Builder
	b.WriteString("```mermaid\ngraph TD\n")
	order := g.byFloor(floor)
	for i, p := range order {
		if i == 0 || floor[p] != floor[order[i-1]] {
			if i > 0 {
				b.WriteString("  end\n")
			}
			fmt.Fprintf(&b, "  subgraph floor%d [floor %d]\n", floor[p], floor[p])
		}
		fmt.Fprintf(&b, "    %s[\"%s\"]\n", nodeID(g.rel(p)), g.rel(p))
	}
	b.WriteString("  end\n")
	for _, p := range order {
		for _, imp := range g.edges[p] {
			fmt.Fprintf(&b, "  %s --> %s\n", nodeID(g.rel(p)), nodeID(g.rel(imp)))
		}
	}
	b.WriteString("```\n")
	return b.String()
}

func environmentTable(g *graph, floor map[string]int) (string, error) {
	var b strings.Builder
	b.WriteString("| package | variables it looks up (os.Getenv, os.LookupEnv) | takes the whole environment (os.Environ) in |\n|---|---|---|\n")
	for _, p := range g.byFloor(floor) {
		e, err := scanEnv(g.pkgs[p])
		if err != nil {
			return "", err
		}
		if e.empty() {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", g.rel(p), cell(codeList(e.lookups)), cell(codeList(e.environ)))
	}
	return b.String(), nil
}

// job is the first sentence of the package's doc comment, without its
// "Package x"/"Command x" opening when x is the package's own name: one
// that names another package is shown whole, so the mistake stays visible.
func job(p *pkg) string {
	for _, opening := range []string{"Package " + p.Name + " ", "Command " + commandName(p) + " "} {
		if rest, ok := strings.CutPrefix(p.Doc, opening); ok {
			return rest
		}
	}
	return p.Doc
}

// commandName is the name a main package's doc comment opens with: its
// directory's.
func commandName(p *pkg) string {
	if p.Name != "main" {
		return p.Name
	}
	return p.ImportPath[strings.LastIndex(p.ImportPath, "/")+1:]
}

// docWarnings names the packages whose doc comment is missing or opens
// with another package's name.
func docWarnings(g *graph) []string {
	var out []string
	for _, p := range g.sorted() {
		if w := docProblem(g.pkgs[p]); w != "" {
			out = append(out, g.rel(p)+": "+w)
		}
	}
	return out
}

func docProblem(p *pkg) string {
	switch {
	case p.Doc == "":
		return "no package doc comment: its job is missing from the document"
	case job(p) == p.Doc:
		return fmt.Sprintf("the doc comment does not open with %q: %q", "Package "+p.Name, p.Doc)
	}
	return ""
}

func nodeID(rel string) string {
	return strings.NewReplacer("/", "_", "-", "_", ".", "_").Replace(rel)
}

func codeList(items []string) string {
	var out []string
	for _, it := range items {
		out = append(out, "`"+it+"`")
	}
	return strings.Join(out, ", ")
}

// cell keeps a table cell on one line and its pipes literal.
func cell(s string) string {
	if s == "" {
		return "—"
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", `\|`)
}
