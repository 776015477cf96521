package cli

import (
	"bytes"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/ociimage"
)

// Annotations come from any registry: a bad GPU count must not panic, and
// escape sequences must print as text, not reach the terminal.
func TestInspectHostileAnnotations(t *testing.T) {
	for _, count := range []string{"-1", "-9223372036854775808", "99999999999", "x"} {
		m := ocispec.Manifest{Annotations: map[string]string{
			ociimage.AnnKind: "process", ociimage.AnnGPUCount: count, ociimage.AnnGPUMemory: "100",
			ociimage.AnnName: "evil\x1b]0;owned\x07\x1b[2J\r\u009b31m", ociimage.AnnGPUModel: "H100\x1b[8m",
		}}
		sum := ociimage.FromManifest(m)
		var out bytes.Buffer
		printSummary(&out, sum)
		s := out.String()
		if strings.ContainsAny(s, "\x1b\x07\r\u009b") {
			t.Errorf("count %s: control characters reached the output: %q", count, s)
		}
		if !strings.Contains(s, `evil\x1b]0;owned\a\x1b[2J\r\u009b31m`) {
			t.Errorf("count %s: name not shown escaped:\n%s", count, s)
		}
	}
}
