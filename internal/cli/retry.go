package cli

import (
	"errors"
	"regexp"
	"strings"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// The CLI words an interrupted restore's remedy at its edge: the core
// knows the checkpoint is whole, the CLI knows the command that restored
// it, so the remedy is that command, to run again as it was given.

// withRetry gives an interrupted restore's error the remedy of running the
// command again; any other error is returned as it is.
func withRetry(err error, args []string) error {
	var se *report.StepError
	if !errors.Is(err, orchestrate.ErrRestoreInterrupted) || !errors.As(err, &se) {
		return err
	}
	se.Remedy = "the checkpoint was not changed and is whole: run `" + commandLine(args) + "` to restore it again"
	return err
}

// commandLine is args as a shell reads them back, the program named cryo.
func commandLine(args []string) string {
	words := []string{"cryo"}
	for _, a := range args[1:] {
		words = append(words, shellWord(a))
	}
	return strings.Join(words, " ")
}

// plainWord is a word a shell reads as itself.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
