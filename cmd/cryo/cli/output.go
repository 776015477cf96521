package cli

import (
	"encoding/json"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// addFormatFlags gives a command Podman's --format (text or json) and --json
// as its short form: scripts read the JSON, people the text.
func addFormatFlags(cmd *cobra.Command) {
	cmd.Flags().String("format", "text", "output `FORMAT`: text or json")
	cmd.Flags().Bool("json", false, "print JSON (same as --format json)")
	_ = cmd.RegisterFlagCompletionFunc("format", completeFormat)
}

// jsonOutput says whether the command should print JSON, refusing a format
// it does not know before anything is done.
func jsonOutput(cmd *cobra.Command) (bool, error) {
	if j, _ := cmd.Flags().GetBool("json"); j {
		return true, nil
	}
	switch f, _ := cmd.Flags().GetString("format"); f {
	case "json":
		return true, nil
	case "text", "":
		return false, nil
	default:
		return false, usageErrorf(cmd, "--format %q: want text or json", f)
	}
}

// printJSON writes v indented, one document, to w (stdout for commands).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stdout is where results go; progress and messages go to stderr, so that
// `cryo restore … | read pid` and `--json | jq` see the result alone.
var stdout io.Writer = os.Stdout
