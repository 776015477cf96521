package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/termtext"
)

func (ap *app) imageListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list the images of the local store",
		Long: `Lists the store's images with their kind, the GPUs a restore needs, their
size in the store (compressed) and raw, when the checkpoint was taken, and
the manifest digest. Only manifests are read.`,
		Example: "  cryo image ls\n  cryo image ls --json | jq -r '.[].ref'",
		Args:    noArgs,
		RunE:    ap.imageList,
	}
	addStoreFlag(cmd.Flags())
	cmd.Flags().BoolP("quiet", "q", false, "print the references only")
	addFormatFlags(cmd, "{{.ref}} {{.digest}}")
	return cmd
}

func (ap *app) imageList(cmd *cobra.Command, _ []string) error {
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	rows, err := ap.listStore(cmd)
	if err != nil {
		return err
	}
	switch {
	case asJSON:
		return ap.printJSON(ap.stdout, rows)
	case fBool(cmd, "quiet"):
		for _, r := range rows {
			fmt.Fprintln(ap.stdout, r.Ref)
		}
		return nil
	}
	tw := tabwriter.NewWriter(ap.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REF\tKIND\tGPUS\tSIZE\tRAW\tCREATED\tDIGEST\tENCRYPTED")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t(%s)\n", termtext.EscapeControl(r.Ref), termtext.EscapeControl(r.Error))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\n", termtext.EscapeControl(r.Ref), orDash(string(r.Kind)), termtext.EscapeControl(r.GPUs()),
			ociimage.Human(r.Size), rawSize(r.RawSize), created(r.Created), shortDigest(r.Digest), r.Encrypted)
	}
	return tw.Flush()
}

// listStore lists the store's images. The default store of a host that
// never built or pulled one does not exist yet: that is an empty list (with
// a note), while a --store that does not exist is a mistake.
func (ap *app) listStore(cmd *cobra.Command) ([]ociimage.ImageInfo, error) {
	st, err := ap.openStore(cmd.Context(), cmd)
	var missing *StoreMissingError
	if errors.As(err, &missing) && !cmd.Flags().Changed("store") {
		fmt.Fprintf(ap.messages(), "note: the image store %s does not exist yet: no images\n", missing.Root)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return st.ListImages(cmd.Context())
}

// rawSize is "-" for an image that does not record its raw size.
func rawSize(n int64) string {
	if n == 0 {
		return "-"
	}
	return ociimage.Human(n)
}

// created is the checkpoint's time in UTC, "-" when unknown.
func created(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// shortDigest is the first 12 hex digits, as docker and podman print IDs.
func shortDigest(d string) string {
	if i := len("sha256:"); len(d) > i+12 {
		return d[i : i+12]
	}
	return d
}
