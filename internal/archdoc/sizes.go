package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
)

// The house rule on the size of types, as data: TestHouseRulesSizes checks
// it against the code, and the document prints it from here.

// sizeRule bounds the types of some packages: the lines their methods
// take, and the files those methods are spread over.
type sizeRule struct {
	trees    []string // packages, each with its subpackages
	maxLines int      // lines of methods per type, each from its func to its closing brace
	maxFiles int      // files that hold a type's methods
	why      string
}

var sizeRules = []sizeRule{
	{trees: []string{"internal/orchestrate"}, maxLines: 150, maxFiles: 2,
		why: "the core that every front end calls is read one type at a time: a type that fits in a sitting, " +
			"in one or two files, is one whose every method a change can be checked against (the `Orchestrator` keeps " +
			"only the entry points, in `internal/orchestrate/entry.go`; the sequences and their parts are small types of their own)"},
}

// typeSize is what the methods of one type take.
type typeSize struct {
	lines int
	files map[string]bool
}

// fileList is the type's files, sorted.
func (s *typeSize) fileList() []string {
	out := make([]string, 0, len(s.files))
	for f := range s.files {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// typeSizes measures the types of p that have methods, over its non-test
// files (those of the pinned build: a file behind a build tag does not
// count). A doc comment is not a method's line.
func typeSizes(p *pkg) (map[string]*typeSize, error) {
	sizes := map[string]*typeSize{}
	fset := token.NewFileSet()
	for _, name := range append(append([]string{}, p.GoFiles...), p.CgoFiles...) {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			t := receiverType(fd.Recv.List[0].Type)
			if sizes[t] == nil {
				sizes[t] = &typeSize{files: map[string]bool{}}
			}
			sizes[t].lines += fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			sizes[t].files[name] = true
		}
	}
	return sizes, nil
}

// receiverType is the name of the type a receiver is of: T for T, *T,
// T[P] and *T[P, Q].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return fmt.Sprint(x)
		}
	}
}

// sizeViolations lists every type of pkgs that breaks a size rule, with
// its line count and its files.
func sizeViolations(module string, pkgs []*pkg) ([]string, error) {
	var out []string
	for _, p := range pkgs {
		rel := p.rel(module)
		for _, r := range sizeRules {
			if !underAny(rel, r.trees) {
				continue
			}
			sizes, err := typeSizes(p)
			if err != nil {
				return nil, err
			}
			for t, s := range sizes {
				if s.lines > r.maxLines || len(s.files) > r.maxFiles {
					out = append(out, fmt.Sprintf("%s: type %s has %d lines of methods in %d files (%s): at most %d lines in %d files",
						rel, t, s.lines, len(s.files), strings.Join(s.fileList(), ", "), r.maxLines, r.maxFiles))
				}
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// sizesText is the size rules as the document prints them.
func sizesText() string {
	var b strings.Builder
	for _, r := range sizeRules {
		fmt.Fprintf(&b, "- No type of `%s` (with its subpackages) has more than %d lines of methods, or its methods in more than %d files "+
			"(a method counts from its `func` to its closing brace; non-test files): %s.\n",
			strings.Join(r.trees, "`, `"), r.maxLines, r.maxFiles, r.why)
	}
	return b.String()
}
