package cli

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/progress"
)

// bar draws the long steps of this invocation on stderr: one updating line
// per step on a terminal (bytes, rate, ETA), plain lines elsewhere, nothing
// with --quiet. One per process, so that the orchestration, the driver
// calls and the image transfers share it; Main closes it before the final
// message.
var bar *progress.Renderer

func renderer(cmd *cobra.Command) *progress.Renderer {
	if bar == nil {
		quiet := cmd.Flags().Lookup("quiet") != nil && fBool(cmd, "quiet")
		bar = progress.ForStderr(quiet)
	}
	return bar
}

// closeRenderer ends the drawing: the terminal's line is finished before
// cryo prints its result or error.
func closeRenderer() {
	if bar != nil {
		bar.Close()
	}
}

// messages is where cryo's own stderr lines go: above the running line on a
// terminal, so that neither garbles the other.
func messages() io.Writer {
	if bar == nil {
		return os.Stderr
	}
	return bar.Writer(os.Stderr)
}
