package inspect

import (
	"cmp"
	"fmt"
	"io"
	"strings"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/termtext"
)

// WriteDetails writes, for `cryo inspect`, the versions that took the
// checkpoint and the details of its CRIU images (or why there are none),
// after the summary's own lines. Every value is escaped
// (termtext.EscapeControl).
func WriteDetails(w io.Writer, sum *ociimage.Summary) error {
	v := sum.Versions
	line := fmt.Sprintf("Versions:  cryo %s, CRIU %s, kernel %s, GPU driver %s\n", orDash(v.Cryo), orDash(v.CRIU), orDash(v.Kernel), orDash(cmp.Or(v.Driver, sum.Driver)))
	if _, err := io.WriteString(w, termtext.EscapeControl(strings.TrimSuffix(line, "\n"))+"\n"); err != nil {
		return err
	}
	if sum.Details == nil {
		if sum.DetailsNote == "" {
			return nil
		}
		_, err := fmt.Fprintf(w, "Details:   %s\n", termtext.EscapeControl(sum.DetailsNote))
		return err
	}
	return Render(w, sum.Details)
}
