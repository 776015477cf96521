package cli

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/progress"
)

// renderer is the run's renderer, made on first use with the command's
// --quiet.
func (ap *app) renderer(cmd *cobra.Command) *progress.Renderer {
	if ap.bar == nil {
		quiet := cmd.Flags().Lookup("quiet") != nil && fBool(cmd, "quiet")
		ap.bar = progress.ForStderr(quiet)
	}
	return ap.bar
}

// closeRenderer ends the drawing: the terminal's line is finished before
// cryo prints its result or error.
func (ap *app) closeRenderer() {
	if ap.bar != nil {
		ap.bar.Close()
	}
}

// messages is where cryo's own stderr lines go: above the running line on a
// terminal, so that neither garbles the other.
func (ap *app) messages() io.Writer {
	if ap.bar == nil {
		return os.Stderr
	}
	return ap.bar.Writer(os.Stderr)
}
