package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The committed document is what the generator writes today.
func TestArchitectureDocIsCurrent(t *testing.T) {
	doc, _, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	root := root(t)
	have, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, doc) {
		t.Fatal("docs/architecture.md is stale: run make docs")
	}
}

// pendingDocFixes are packages whose doc comment does not yet name the
// package; none today. Remove each once its comment is fixed (the test
// says so).
var pendingDocFixes = map[string]bool{}

// Every package says its job in a doc comment that names the package: the
// document's job column is that sentence.
func TestPackageDocComments(t *testing.T) {
	module, pkgs, err := loadPackages(root(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		rel := p.rel(module)
		problem := docProblem(p)
		switch {
		case problem != "" && !pendingDocFixes[rel]:
			t.Errorf("%s: %s", rel, problem)
		case problem == "" && pendingDocFixes[rel]:
			t.Errorf("%s: its doc comment is fixed: remove it from pendingDocFixes", rel)
		}
	}
}

// The prose names packages and files in backquotes; each must exist, so
// that a rename elsewhere shows here rather than as a stale sentence.
func TestTemplateNamesExist(t *testing.T) {
	root := root(t)
	paths := regexp.MustCompile("`((?:cmd|internal|contrib)/[A-Za-z0-9_./-]+)`").FindAllStringSubmatch(tmpl, -1)
	if len(paths) == 0 {
		t.Fatal("no path found in the template: the pattern is wrong")
	}
	for _, m := range paths {
		if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(m[1], "/"))); err != nil {
			t.Errorf("architecture.md.tmpl names %s, which does not exist: %v", m[1], err)
		}
	}
}

// An import cycle has no floors: the generator refuses it, naming it.
func TestFloorsRefuseCycle(t *testing.T) {
	mk := func(path string, imports ...string) *pkg { return &pkg{ImportPath: "m/" + path, Imports: imports} }
	g := newGraph("m", []*pkg{mk("a", "m/b"), mk("b", "m/c"), mk("c", "m/a")})
	if _, err := g.floors(); err == nil || !strings.Contains(err.Error(), "import cycle: m/a → m/b → m/c → m/a") {
		t.Fatalf("cycle not refused as such: %v", err)
	}
	g = newGraph("m", []*pkg{mk("top", "m/mid", "m/leaf", "fmt"), mk("mid", "m/leaf"), mk("leaf")})
	floor, err := g.floors()
	if err != nil {
		t.Fatal(err)
	}
	if floor["m/top"] != 2 || floor["m/mid"] != 1 || floor["m/leaf"] != 0 {
		t.Fatalf("floors: %v", floor)
	}
}

func root(t *testing.T) string {
	t.Helper()
	r, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The module keeps its house rules (rules.go): each broken one fails here,
// naming the import.
func TestHouseRules(t *testing.T) {
	module, pkgs, err := loadPackages(root(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations(newGraph(module, pkgs)) {
		t.Error(v)
	}
}

// The node binary links no Kubernetes client (bans), through any chain
// of imports.
func TestHouseRulesLinks(t *testing.T) {
	r := root(t)
	module, _, err := loadPackages(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := linkViolations(module, goDeps(r))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		t.Error(v)
	}
}

// The bans catch a banned package however deep, and only the banned.
func TestHouseRulesLinksRefuse(t *testing.T) {
	deps := map[string][]string{"m/cmd/cryo": {"m/internal/cli", "k8s.io/cri-api/pkg/apis/runtime/v1", "k8s.io/klog/v2",
		"k8s.io/apimachinery/pkg/runtime", "sigs.k8s.io/controller-runtime", "k8s.io/client-go/rest"}}
	got, err := linkViolations("m", func(main string) ([]string, error) { return deps[main], nil })
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{"cmd/cryo links k8s.io/apimachinery/pkg/runtime", "cmd/cryo links sigs.k8s.io/controller-runtime:", "cmd/cryo links k8s.io/client-go/rest"} {
		if !strings.Contains(joined, want) {
			t.Errorf("violations lack %q:\n%s", want, joined)
		}
	}
	if len(got) != 3 {
		t.Errorf("%d violations, want 3 (cri-api and klog are allowed):\n%s", len(got), joined)
	}
}

// The rules catch what they forbid, each named by its import.
func TestHouseRulesRefuse(t *testing.T) {
	mk := func(path string, imports ...string) *pkg {
		for i, imp := range imports {
			if !strings.Contains(imp, ".") {
				imports[i] = "m/" + imp
			}
		}
		return &pkg{ImportPath: "m/" + path, Imports: imports}
	}
	g := newGraph("m", []*pkg{
		mk("cmd/cryo", "internal/cli", "internal/shim"),
		mk("internal/cli", "internal/criuaction", "internal/orchestrate"),
		mk("internal/criuaction"),
		mk("internal/criuaction/hooks"),
		mk("internal/runcwrap", "internal/criuaction/hooks", "github.com/checkpoint-restore/go-criu/v7/crit"),
		mk("internal/shim", "github.com/containerd/containerd/api/services/content/v1"),
		mk("internal/orchestrate", "internal/shim", "internal/config", "github.com/containerd/containerd/v2/client"),
		mk("internal/config", "internal/orchestrate"),
	})
	got := strings.Join(violations(g), "\n")
	for _, want := range []string{
		"internal/cli imports internal/criuaction: front end internal/cli may not import front end internal/criuaction",
		"internal/orchestrate imports internal/shim: the core may not import a front end (internal/shim)",
		"internal/config imports internal/orchestrate: a leaf imports only other leaves",
		"internal/orchestrate imports github.com/containerd/containerd/v2/client: only internal/cli/ctrd and internal/shim may talk to containerd",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violations lack %q:\n%s", want, got)
		}
	}
	if n := len(violations(g)); n != 4 {
		t.Errorf("%d violations, want 4 (cmd/, the crossing, the shim's containerd and go-criu's crit are allowed):\n%s", n, got)
	}
}

// The core's types keep their size (sizes.go): each one too big fails
// here, naming it with its line count and its files.
func TestHouseRulesSizes(t *testing.T) {
	module, pkgs, err := loadPackages(root(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := sizeViolations(module, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		t.Error(v)
	}
}

// The size rule counts a type's methods over its files, pointer and
// generic receivers alike, and only in the packages it covers.
func TestHouseRulesSizesRefuse(t *testing.T) {
	dir := t.TempDir()
	method := func(recv, name string, body int) string {
		return fmt.Sprintf("func (%s) %s() {\n%s}\n", recv, name, strings.Repeat("\t_ = 0\n", body))
	}
	files := map[string]string{
		"a.go": "package o\ntype Big struct{}\ntype Small struct{}\ntype G[T any] struct{}\n" +
			method("b *Big", "A", 100) + method("s Small", "A", 1) + method("g *G[T]", "A", 1),
		"b.go": "package o\n" + method("b Big", "B", 60) + method("g G[T]", "B", 1),
		"c.go": "package o\n" + method("g *G[T]", "C", 1),
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"a.go", "b.go", "c.go"}
	pkgs := []*pkg{
		{ImportPath: "m/internal/orchestrate/x", Dir: dir, GoFiles: names},
		{ImportPath: "m/internal/other", Dir: dir, GoFiles: names},
	}
	got, err := sizeViolations("m", pkgs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"internal/orchestrate/x: type Big has 164 lines of methods in 2 files (a.go, b.go): at most 150 lines in 2 files",
		"internal/orchestrate/x: type G has 9 lines of methods in 3 files (a.go, b.go, c.go): at most 150 lines in 2 files",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations\n got: %q\nwant: %q", got, want)
	}
}
