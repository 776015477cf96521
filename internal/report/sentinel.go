package report

import "errors"

// Sentinel is a sentinel error that carries its class where it is
// defined: its message is text, and a front end reads the class at its
// edge (ClassIn; the shim gives containerd's errdefs classes to
// containerd), so that no table far from the sentinel maps one to the
// other, and a new sentinel is one edit.
//
// The class is not matched by errors.Is: a check for containerd's
// classes inside cryo sees containerd's own errors only, as it did
// before sentinels had classes. A class may be another sentinel: a
// wording of it that says more of where it happened ("no process to
// checkpoint" is cuda's "no such process" of a whole target); that one
// errors.Is does match, and its class is the other's.
func Sentinel(text string, class error) error {
	return &sentinel{text: text, class: class}
}

type sentinel struct {
	text  string
	class error
}

func (e *sentinel) Error() string { return e.text }

// Is makes a sentinel that words another match it too.
func (e *sentinel) Is(target error) bool {
	var of *sentinel
	return errors.As(e.class, &of) && errors.Is(of, target)
}

// ClassIn is the class of the first Sentinel in err's chain (errors.As's
// order), following a wording to the sentinel it words; nil if none.
func ClassIn(err error) error {
	var s *sentinel
	if !errors.As(err, &s) {
		return nil
	}
	for {
		next, ok := s.class.(*sentinel)
		if !ok {
			return s.class
		}
		s = next
	}
}
