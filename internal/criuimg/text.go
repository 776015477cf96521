package criuimg

import (
	"strconv"
	"strings"
)

// CommandLine is a process's command line as one line: argv joined by
// spaces, an argument that holds a space or nothing quoted, or comm in
// brackets (as ps shows a process without one) when argv was not read.
func (p Process) CommandLine() string {
	if len(p.Cmdline) == 0 {
		return "[" + p.Comm + "]"
	}
	parts := make([]string, len(p.Cmdline))
	for i, a := range p.Cmdline {
		if a == "" || strings.ContainsAny(a, " \t\n\"'") {
			a = strconv.Quote(a)
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}
