package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strconv"
)

// envReads is where one package reads the process environment itself:
// the variables it looks up (os.Getenv, os.LookupEnv), and the files that
// take the whole environment (os.Environ), mostly to pass it on to a child.
// The document lists them from the code, since "who reads the environment"
// is a claim that hand-written prose got wrong.
type envReads struct {
	lookups []string // the argument as written: "TTRPC_ADDRESS", config.EnvHelper
	environ []string // file names
}

func (e envReads) empty() bool { return len(e.lookups)+len(e.environ) == 0 }

// scanEnv parses the package's non-test files.
func scanEnv(p *pkg) (envReads, error) {
	lookups, environ := map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range append(append([]string{}, p.GoFiles...), p.CgoFiles...) {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return envReads{}, err
		}
		os := osName(f)
		if os == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch osCall(call, os) {
			case "Getenv", "LookupEnv":
				if len(call.Args) == 1 {
					lookups[types.ExprString(call.Args[0])] = true
				}
			case "Environ":
				environ[name] = true
			}
			return true
		})
	}
	return envReads{lookups: keys(lookups), environ: keys(environ)}, nil
}

// osName is the name the file imports package os under; "" if it does not.
func osName(f *ast.File) string {
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == "os" {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return "os"
		}
	}
	return ""
}

// osCall is the function of package os that call calls, if any.
func osCall(call *ast.CallExpr, os string) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); ok && id.Name == os {
		return sel.Sel.Name
	}
	return ""
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
