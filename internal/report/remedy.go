package report

import (
	"errors"
	"strings"
)

// Remedied is a cause that knows its one remedy (a refused pre-check, a
// cause made by WithRemedy): the report prints Cause and uses RemedyText
// in place of its own.
type Remedied interface {
	error
	Cause() string
	RemedyText() string
}

// WithRemedy attaches remedy to err. Its message is err's followed by
// "; remedy: " and the remedy, as a cause printed on its own reads; a
// StepError around it prints the cause and the remedy each in its place.
// The remedy travels as a value, so no reader parses it out of a message.
func WithRemedy(err error, remedy string) error {
	if err == nil {
		return nil
	}
	return &remedied{err: err, remedy: remedy}
}

type remedied struct {
	err    error
	remedy string
}

func (e *remedied) Error() string      { return Render(e.Cause(), e.remedy) }
func (e *remedied) Unwrap() error      { return e.err }
func (e *remedied) RemedyText() string { return e.remedy }

// Cause is the message without a remedy: a remedy of the error wrapped
// (a device node's "load the NVIDIA driver" under a restore's "pass
// --gpus") gives way to this one, which knows more of what was asked, so
// that the message ends with one remedy, not two.
func (e *remedied) Cause() string {
	msg := e.err.Error()
	var inner Remedied
	if errors.As(e.err, &inner) {
		if tail := remedySep + inner.RemedyText(); strings.HasSuffix(msg, tail) {
			return strings.TrimSuffix(msg, tail)
		}
	}
	return msg
}

// Render is how a cause and its remedy read together when the cause is
// printed on its own: the one place that writes "; remedy: ". A Remedied
// type's Error uses it, so that its message reads as a StepError's does.
func Render(cause, remedy string) string { return cause + remedySep + remedy }

const remedySep = "; remedy: "

// Split is the one reader of a remedy written into a message: the cause
// before "; remedy: " and the remedy after it, or the whole message and
// false. Only text that crossed a process boundary needs it (a report
// quoted by containerd, a failure read back from disk); a value carries
// its remedy as Remedied does.
func Split(msg string) (cause, remedy string, ok bool) {
	return strings.Cut(msg, remedySep)
}

// Key names a remedy whose words depend on the front end the user came
// through: the fix is an option or a configuration that each tool spells
// its own way (`--shell-job` means nothing to a ctr user). The core picks
// the key; the front end's Wording gives the words.
type Key string

// Wording is one front end's words for the keyed remedies, kept in the
// front end's own package.
type Wording map[Key]string
