package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/report"
)

// addFormatFlags gives a command Podman's --format (text or json) and --json
// as its short form: scripts read the JSON, people the text. example is a
// template over this command's own JSON fields: the help shows it, and
// TestFormatExamples runs it on the command's result, so that the one
// example a user copies works.
func addFormatFlags(cmd *cobra.Command, example string) {
	cmd.Flags().String("format", "text", "output `FORMAT`: text, json, or a Go template over the JSON fields, as Podman's (e.g. '"+example+"'; one line per item of a list)")
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[formatExample] = example
	cmd.Flags().Bool("json", false, "print JSON (same as --format json)")
	_ = cmd.RegisterFlagCompletionFunc("format", completeFormat)
}

// formatExample is the annotation that holds a command's --format example.
const formatExample = "cryo.format-example"

// jsonOutput says whether the command should print JSON, refusing a format
// it does not know before anything is done.
func (ap *app) jsonOutput(cmd *cobra.Command) (bool, error) {
	if j, _ := cmd.Flags().GetBool("json"); j {
		return true, nil
	}
	f, _ := cmd.Flags().GetString("format")
	switch {
	case f == "json":
		return true, nil
	case f == "text" || f == "":
		return false, nil
	case strings.Contains(f, "{{"):
		t, err := template.New("format").Option("missingkey=error").Parse(f)
		if err != nil {
			return false, usageRemedy(cmd, fmt.Errorf("--format: %v", err), "fix the template (fields are the JSON output's, e.g. {{.pid}})")
		}
		ap.tmpl = t
		return true, nil
	default:
		return false, usageErrorf(cmd, "--format %q: want text, json or a Go template such as '{{.pid}}'", f)
	}
}

// printJSON writes v indented, one document, to w (stdout for commands),
// or, with a --format template, v's JSON rendered through it: a line per
// item of a list, one line for anything else.
func (ap *app) printJSON(w io.Writer, v any) error {
	if ap.tmpl != nil {
		return printTemplate(w, ap.tmpl, v)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printTemplate renders v as its JSON reads (the fields by their JSON
// names), so that a template and a script over --json see the same data.
func printTemplate(w io.Writer, t *template.Template, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return err
	}
	items, ok := doc.([]any)
	if !ok {
		items = []any{doc}
	}
	for _, it := range items {
		var b strings.Builder
		if err := t.Execute(&b, it); err != nil {
			return report.WithRemedy(fmt.Errorf("--format: %w", err), "use the fields of the command's --json output")
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), "\n"))
	}
	return nil
}
