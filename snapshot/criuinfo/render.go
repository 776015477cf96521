package criuinfo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Render writes the details for a terminal: the process tree with each
// process's command line, open files and sockets, then the mounts, the
// memory and CRIU's statistics. Every value from the images is escaped
// (EscapeControl): a command line or a path can hold anything.
func Render(w io.Writer, d *Details) error {
	ew := &errWriter{w: w}
	renderTree(ew, d)
	renderMounts(ew, d.Mounts)
	renderStats(ew, d)
	if len(d.Missing) > 0 {
		fmt.Fprintf(ew, "Images not in the checkpoint: %s\n", EscapeControl(strings.Join(d.Missing, ", ")))
	}
	return ew.err
}

// node is one line of a tree and the lines under it.
type node struct {
	label string
	kids  []node
}

func renderTree(w io.Writer, d *Details) {
	fmt.Fprintln(w, "Process tree")
	roots := d.Roots()
	seen := map[int]bool{}
	for i, p := range roots {
		printNode(w, processNode(d, p, seen), "", i == len(roots)-1)
	}
}

// processNode builds a process's subtree; seen guards against a damaged
// pstree whose parents form a loop.
func processNode(d *Details, p Process, seen map[int]bool) node {
	seen[p.PID] = true
	n := node{label: fmt.Sprintf("%d  %s", p.PID, p.CommandLine())}
	n.kids = append(n.kids, node{label: fmt.Sprintf("threads %d, memory dumped %s (mapped %s)", p.Threads, human(p.PagesBytes), human(p.MappedBytes))})
	if p.Exe != "" || p.Cwd != "" {
		n.kids = append(n.kids, node{label: fmt.Sprintf("exe %s, cwd %s, root %s", orDash(p.Exe), orDash(p.Cwd), orDash(p.Root))})
	}
	if len(p.Files) > 0 {
		files := node{label: "open files"}
		for _, f := range p.Files {
			files.kids = append(files.kids, node{label: fmt.Sprintf("%-4d %-8s %s", f.FD, f.Type, f.Path)})
		}
		n.kids = append(n.kids, files)
	}
	for _, c := range d.Children(p.PID) {
		if !seen[c.PID] {
			n.kids = append(n.kids, processNode(d, c, seen))
		}
	}
	return n
}

func printNode(w io.Writer, n node, prefix string, last bool) {
	branch, next := "├── ", "│   "
	if last {
		branch, next = "└── ", "    "
	}
	fmt.Fprintf(w, "%s%s%s\n", prefix, branch, EscapeControl(n.label))
	for i, k := range n.kids {
		printNode(w, k, prefix+next, i == len(n.kids)-1)
	}
}

func renderMounts(w io.Writer, mounts []Mount) {
	if len(mounts) == 0 {
		return
	}
	fmt.Fprintln(w, "Mounts")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MOUNT POINT\tTYPE\tSOURCE")
	for _, m := range mounts {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", EscapeControl(m.MountPoint), EscapeControl(m.FSType), EscapeControl(orDash(m.Source)))
	}
	tw.Flush()
}

func renderStats(w io.Writer, d *Details) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "Memory dumped:\t%s in page maps, %s in pages images\n", human(d.Memory.PagesBytes), human(d.Memory.PagesFileBytes))
	if s := d.DumpStats; s != nil {
		fmt.Fprintf(tw, "CRIU dump:\tfreezing %s, frozen %s, memdump %s, memwrite %s\n", micros(s.FreezingUS), micros(s.FrozenUS), micros(s.MemdumpUS), micros(s.MemwriteUS))
		fmt.Fprintf(tw, "\tpages scanned %d, written %d, skipped (parent) %d, lazy %d\n", s.PagesScanned, s.PagesWritten, s.PagesSkippedParent, s.PagesLazy)
	}
	if s := d.RestoreStats; s != nil {
		fmt.Fprintf(tw, "CRIU restore:\tforking %s, restore %s\n", micros(s.ForkingUS), micros(s.RestoreUS))
		fmt.Fprintf(tw, "\tpages restored %d, compared %d, skipped (COW) %d\n", s.PagesRestored, s.PagesCompared, s.PagesSkippedCow)
	}
}

// errWriter keeps the first write error, so that Render can print freely
// and report it once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
