package cli

import (
	"bytes"
	"strings"
	"testing"
)

// --format takes a Go template over the JSON fields, as Podman's: a line
// per item of a list, one for a single result; a broken template or an
// unknown field is refused with the remedy.
func TestFormatTemplate(t *testing.T) {
	type row struct {
		Ref  string `json:"ref"`
		Size int64  `json:"size"`
	}
	cmd := imageCommand()
	ls, _, err := cmd.Find([]string{"ls"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outputTemplate = nil })
	if err := ls.Flags().Set("format", "{{.ref}} {{.size}}"); err != nil {
		t.Fatal(err)
	}
	if asJSON, err := jsonOutput(ls); err != nil || !asJSON || outputTemplate == nil {
		t.Fatalf("a template: %v %v", asJSON, err)
	}
	var b bytes.Buffer
	if err := printJSON(&b, []row{{"a:v1", 10}, {"b:v2", 20}}); err != nil || b.String() != "a:v1 10\nb:v2 20\n" {
		t.Fatalf("a list through the template: %q, %v", b.String(), err)
	}
	b.Reset()
	if err := printJSON(&b, row{"c:v3", 30}); err != nil || b.String() != "c:v3 30\n" {
		t.Fatalf("one result through the template: %q, %v", b.String(), err)
	}
	ls.Flags().Set("format", "{{.nope}}")
	jsonOutput(ls)
	if err := printJSON(&b, row{"c", 1}); err == nil || !strings.Contains(err.Error(), "remedy") {
		t.Fatalf("an unknown field: %v", err)
	}
	ls.Flags().Set("format", "{{.ref")
	if _, err := jsonOutput(ls); err == nil {
		t.Fatal("a broken template was accepted")
	}
}
