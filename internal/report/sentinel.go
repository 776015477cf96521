package report

import "errors"

// Sentinel is a sentinel error that carries its class where it is
// defined: its message is text, and errors.Is matches it, the class and
// whatever the class matches. Front ends read the class at their edge
// (the shim gives containerd's errdefs classes to containerd through
// errdefs.Resolve), so no table far from the sentinel maps one to the
// other, and a new sentinel is one edit.
//
// A class may be another sentinel: a wording of it that says more of
// where it happened ("no process to checkpoint" is cuda's "no such
// process" of a whole target), and so shares its class too.
func Sentinel(text string, class error) error {
	return &sentinel{text: text, class: class}
}

type sentinel struct {
	text  string
	class error
}

func (e *sentinel) Error() string { return e.text }

// Is makes the class and what the class matches targets too; the
// sentinel has no Unwrap, so that its message stays its own.
func (e *sentinel) Is(target error) bool {
	return e.class != nil && (target == e.class || errors.Is(e.class, target))
}

// ClassOf is the class a Sentinel was made with, or nil for any other
// error: what a test reads to prove every sentinel has one.
func ClassOf(err error) error {
	if s, ok := err.(*sentinel); ok {
		return s.class
	}
	return nil
}
