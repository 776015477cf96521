// Command archdoc writes docs/architecture.md: the package graph, its
// floors and each package's job are generated from `go list` and the
// packages' own doc comments, around the hand-written prose of
// architecture.md.tmpl, so that the document cannot drift from the code.
// `make docs` runs it; its test fails when the committed document is stale.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("o", "", "write the document to this file (default: stdout)")
	flag.Parse()
	doc, warnings, err := generate()
	for _, w := range warnings {
		fmt.Fprintln(os.Stderr, "archdoc: warning:", w)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "archdoc:", err)
		os.Exit(1)
	}
	if *out == "" {
		os.Stdout.Write(doc)
		return
	}
	if err := writeFile(*out, doc); err != nil {
		fmt.Fprintln(os.Stderr, "archdoc:", err)
		os.Exit(1)
	}
}

// writeFile replaces path whole or not at all: a failed run must not leave
// a truncated document behind (as a shell redirect would).
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".archdoc-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
