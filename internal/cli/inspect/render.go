// Package inspect renders what `cryo inspect` shows of a checkpoint: the
// details criuimg decodes from its CRIU images (the process tree, files,
// sockets, mounts, memory and CRIU's statistics) and the versions of an
// image's summary. It is the one place that writes them for a terminal;
// criuimg and ociimage only read. Every value a checkpoint records is
// escaped (termtext.EscapeControl): a command line or a path can hold anything.
package inspect

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/termtext"
)

// Sections chooses what RenderSections writes, as checkpointctl's
// inspect flags do (--ps-tree, --files, --sockets, --mounts, --stats).
type Sections struct {
	Tree    bool // the process tree with command lines
	Files   bool // each process's open files
	Sockets bool // each process's sockets, decoded
	Env     bool // each process's environment (masked by the caller)
	Mounts  bool
	Stats   bool // memory dumped and CRIU's statistics
	// PID, when not 0, restricts the process sections to that process.
	PID int
}

// DefaultSections is what Render writes: everything but the environment
// (which may hold secrets) and the decoded sockets (open files show them).
func DefaultSections() Sections {
	return Sections{Tree: true, Files: true, Mounts: true, Stats: true}
}

// Render writes the details for a terminal: the process tree with each
// process's command line, open files and sockets, then the mounts, the
// memory and CRIU's statistics. Every value from the images is escaped
// (termtext.EscapeControl): a command line or a path can hold anything.
func Render(w io.Writer, d *criuimg.Details) error { return RenderSections(w, d, DefaultSections()) }

// RenderSections writes the sections s chooses, in Render's order.
func RenderSections(w io.Writer, d *criuimg.Details, s Sections) error {
	ew := &errWriter{w: w}
	if s.Tree || s.Files || s.Sockets || s.Env {
		renderTree(ew, d, s)
	}
	if s.Mounts {
		renderMounts(ew, d.Mounts)
	}
	if s.Stats {
		renderStats(ew, d)
	}
	if len(d.Missing) > 0 && s == DefaultSections() {
		fmt.Fprintf(ew, "Images not in the checkpoint: %s\n", termtext.EscapeControl(strings.Join(d.Missing, ", ")))
	}
	return ew.err
}

// node is one line of a tree and the lines under it.
type node struct {
	label string
	kids  []node
}

func renderTree(w io.Writer, d *criuimg.Details, s Sections) {
	fmt.Fprintln(w, "Process tree")
	roots := d.Roots()
	if s.PID != 0 {
		// One process, without its children: what --pid asks about.
		roots = nil
		for _, p := range d.Processes {
			if p.PID == s.PID {
				roots = append(roots, p)
				break
			}
		}
		if len(roots) == 0 {
			fmt.Fprintf(w, "└── no process %d in the checkpoint\n", s.PID)
			return
		}
	}
	seen := map[int]bool{}
	for i, p := range roots {
		printNode(w, processNode(d, p, seen, s), "", i == len(roots)-1)
	}
}

// processNode builds a process's subtree; seen guards against a damaged
// pstree whose parents form a loop.
func processNode(d *criuimg.Details, p criuimg.Process, seen map[int]bool, s Sections) node {
	seen[p.PID] = true
	n := node{label: fmt.Sprintf("%d  %s", p.PID, p.CommandLine())}
	if s.Tree {
		n.kids = append(n.kids, node{label: fmt.Sprintf("threads %d, memory dumped %s (mapped %s)", p.Threads, human(p.PagesBytes), human(p.MappedBytes))})
		if p.Exe != "" || p.Cwd != "" {
			n.kids = append(n.kids, node{label: fmt.Sprintf("exe %s, cwd %s, root %s", orDash(p.Exe), orDash(p.Cwd), orDash(p.Root))})
		}
	}
	if s.Files && len(p.Files) > 0 {
		files := node{label: "open files"}
		for _, f := range p.Files {
			files.kids = append(files.kids, node{label: fmt.Sprintf("%-4d %-8s %s", f.FD, f.Type, f.Path)})
		}
		n.kids = append(n.kids, files)
	}
	if s.Sockets && len(p.Sockets) > 0 {
		socks := node{label: "sockets"}
		for _, k := range p.Sockets {
			socks.kids = append(socks.kids, node{label: fmt.Sprintf("%-4d %s", k.FD, k)})
		}
		n.kids = append(n.kids, socks)
	}
	if s.Env {
		n.kids = append(n.kids, envNode(p))
	}
	if s.PID != 0 {
		return n
	}
	for _, c := range d.Children(p.PID) {
		if !seen[c.PID] {
			n.kids = append(n.kids, processNode(d, c, seen, s))
		}
	}
	return n
}

func envNode(p criuimg.Process) node {
	if len(p.Env) == 0 {
		return node{label: "environment: not read (its memory pages are not at hand)"}
	}
	env := node{label: "environment"}
	for _, e := range p.Env {
		env.kids = append(env.kids, node{label: e})
	}
	return env
}

func printNode(w io.Writer, n node, prefix string, last bool) {
	branch, next := "├── ", "│   "
	if last {
		branch, next = "└── ", "    "
	}
	fmt.Fprintf(w, "%s%s%s\n", prefix, branch, termtext.EscapeControl(n.label))
	for i, k := range n.kids {
		printNode(w, k, prefix+next, i == len(n.kids)-1)
	}
}

func renderMounts(w io.Writer, mounts []criuimg.Mount) {
	if len(mounts) == 0 {
		return
	}
	fmt.Fprintln(w, "Mounts")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MOUNT POINT\tTYPE\tSOURCE")
	for _, m := range mounts {
		fstype, source := m.FSType, orDash(m.Source)
		if m.Root != "" {
			source += " [" + m.Root + "]"
		}
		if m.HostSource != "" {
			fstype, source = "bind", m.HostSource
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", termtext.EscapeControl(m.MountPoint), termtext.EscapeControl(fstype), termtext.EscapeControl(source))
	}
	tw.Flush()
}

func renderStats(w io.Writer, d *criuimg.Details) {
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
