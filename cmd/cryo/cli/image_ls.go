package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/snapshot/ociimage"
)

// imageRow is one image of `cryo image ls`; the JSON form is a list of them.
type imageRow struct {
	Ref       string `json:"ref"`
	Kind      string `json:"kind"`
	Name      string `json:"name,omitempty"`
	GPUs      string `json:"gpus"`
	Size      int64  `json:"size_bytes"`
	RawSize   int64  `json:"raw_size_bytes"`
	Created   string `json:"created"`
	Digest    string `json:"digest"`
	Encrypted bool   `json:"encrypted"`
}

func imageListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list the images of the local store",
		Long: `Lists the store's images with their kind, the GPUs a restore needs, their
size in the store (compressed) and raw, when the checkpoint was taken, and
the manifest digest. Only manifests are read.`,
		Example: "  cryo image ls\n  cryo image ls --json | jq -r '.[].ref'",
		Args:    noArgs,
		RunE:    imageList,
	}
	addStoreFlag(cmd.Flags())
	cmd.Flags().BoolP("quiet", "q", false, "print the references only")
	addFormatFlags(cmd)
	return cmd
}

func imageList(cmd *cobra.Command, _ []string) error {
	asJSON, err := jsonOutput(cmd)
	if err != nil {
		return err
	}
	st, err := openStore(cmd.Context(), cmd)
	if err != nil {
		return err
	}
	refs, err := st.List(cmd.Context())
	if err != nil {
		return err
	}
	rows := make([]imageRow, 0, len(refs))
	for _, ref := range refs {
		s, err := st.InspectLocal(cmd.Context(), ref)
		if err != nil {
			return err
		}
		rows = append(rows, imageRow{Ref: ref, Kind: string(s.Kind), Name: s.Name, GPUs: gpuShort(s), Size: s.Sizes.Compressed,
			RawSize: s.Sizes.Total, Created: s.Created.UTC().Format("2006-01-02T15:04:05Z"), Digest: s.Digest, Encrypted: s.Encrypted})
	}
	switch {
	case asJSON:
		return printJSON(stdout, rows)
	case fBool(cmd, "quiet"):
		for _, r := range rows {
			fmt.Fprintln(stdout, r.Ref)
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REF\tKIND\tGPUS\tSIZE\tRAW\tCREATED\tDIGEST")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", escapeControl(r.Ref), r.Kind, escapeControl(r.GPUs), ociimage.Human(r.Size),
			ociimage.Human(r.RawSize), r.Created, shortDigest(r.Digest))
	}
	return tw.Flush()
}

// gpuShort is "2× NVIDIA H200" or "-".
func gpuShort(s *ociimage.Summary) string {
	if len(s.GPUs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%d× %s", len(s.GPUs), s.GPUs[0].Name)
}

// shortDigest is the first 12 hex digits, as docker and podman print IDs.
func shortDigest(d string) string {
	if i := len("sha256:"); len(d) > i+12 {
		return d[i : i+12]
	}
	return d
}
