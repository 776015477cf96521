// Package termtext makes text that a checkpoint or an image records safe
// to print on a terminal. Command lines, paths, names and annotations are
// the checkpointed program's or the image author's to choose, and every
// front end that prints them (`cryo inspect`, `cryo ps`, `cryo image ls`)
// escapes them the same way.
package termtext

import (
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
