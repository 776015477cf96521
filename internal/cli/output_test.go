package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
)

// --format takes a Go template over the JSON fields, as Podman's: a line
// per item of a list, one for a single result; a broken template or an
// unknown field is refused with the remedy.
func TestFormatTemplate(t *testing.T) {
	type row struct {
		Ref  string `json:"ref"`
		Size int64  `json:"size"`
	}
	ap := newApp(config.Config{})
	cmd := ap.imageCommand()
	ls, _, err := cmd.Find([]string{"ls"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Flags().Set("format", "{{.ref}} {{.size}}"); err != nil {
		t.Fatal(err)
	}
	if asJSON, err := ap.jsonOutput(ls); err != nil || !asJSON || ap.tmpl == nil {
		t.Fatalf("a template: %v %v", asJSON, err)
	}
	var b bytes.Buffer
	if err := ap.printJSON(&b, []row{{"a:v1", 10}, {"b:v2", 20}}); err != nil || b.String() != "a:v1 10\nb:v2 20\n" {
		t.Fatalf("a list through the template: %q, %v", b.String(), err)
	}
	b.Reset()
	if err := ap.printJSON(&b, row{"c:v3", 30}); err != nil || b.String() != "c:v3 30\n" {
		t.Fatalf("one result through the template: %q, %v", b.String(), err)
	}
	ls.Flags().Set("format", "{{.nope}}")
	ap.jsonOutput(ls)
	if err := ap.printJSON(&b, row{"c", 1}); err == nil || !strings.Contains(err.Error(), "remedy") {
		t.Fatalf("an unknown field: %v", err)
	}
	ls.Flags().Set("format", "{{.ref")
	if _, err := ap.jsonOutput(ls); err == nil {
		t.Fatal("a broken template was accepted")
	}
}
