package criuimg

import (
	"github.com/cryo-gpu/cryo/internal/progress"

	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// EscapeControl writes control characters (C0, DEL, C1: escape sequences,
// carriage returns, the tab that would break a table) and invalid UTF-8
// as Go escapes, so that a hostile name prints as text. Everything a
// checkpoint records (command lines, paths, annotations of any registry)
// is the checkpointed program's or the image's author's to choose.
func EscapeControl(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

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

// human writes a byte count in binary units ("20.0 KiB"), as every cryo
// line does.
func human(n int64) string { return progress.Human(n) }

// micros writes CRIU's microsecond times as a duration: "1.234 ms".
func micros(us uint32) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%d µs", us)
	case us < 1000000:
		return fmt.Sprintf("%.3f ms", float64(us)/1e3)
	}
	return fmt.Sprintf("%.3f s", float64(us)/1e6)
}
