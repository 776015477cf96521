package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/termtext"
)

// listed is one checkpoint of `cryo inspect list`.
type listed struct {
	Target       string    `json:"target"`
	Kind         string    `json:"kind,omitempty"`
	Name         string    `json:"name,omitempty"`
	Checkpointed time.Time `json:"checkpointed,omitzero"`
	Size         int64     `json:"size"`
	GPUs         string    `json:"gpus,omitempty"`
	State        string    `json:"state,omitempty"`
	Error        string    `json:"error,omitempty"`
}

func (ap *app) inspectListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [DIR | --store[=STORE]]",
		Short: "list the checkpoints in a directory, or in the image store",
		Long: `Lists the checkpoints found directly in DIR (default: the current
directory): checkpoint directories ("cryo checkpoint --dir", a container's
CRIU image directory, an extracted export) and export tars (.tar, .tar.gz,
.tgz, .tar.zst), each with its kind, when it was taken, its size, the GPUs
a restore needs, and whether it is complete. Anything else is skipped.

--store lists the images of the local image store instead (as "cryo image
ls", from their manifests alone).`,
		Example: "  cryo inspect list /var/lib/ckpt\n  cryo inspect list --store\n  cryo inspect list --json /var/lib/ckpt | jq -r '.[].target'",
		Args:    cobra.MaximumNArgs(1),
		RunE:    ap.inspectList,
	}
	addStoreFlag(cmd.Flags())
	// --store alone means the default store: a bare flag, not one that
	// swallows the DIR after it.
	cmd.Flags().Lookup("store").NoOptDefVal = " "
	addFormatFlags(cmd, "{{.target}} {{.size}}")
	return cmd
}

func (ap *app) inspectList(cmd *cobra.Command, args []string) error {
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	var rows []listed
	if cmd.Flags().Changed("store") {
		rows, err = ap.listStoreRows(cmd, args)
	} else {
		dir := "."
		if len(args) == 1 {
			dir = args[0]
		}
		rows, err = listDir(dir)
	}
	if err != nil {
		return err
	}
	if asJSON {
		if rows == nil {
			rows = []listed{}
		}
		return ap.printJSON(ap.stdout, rows)
	}
	return ap.printListed(rows)
}

// listStoreRows lists the image store (the flag's value, the argument after
// a bare --store, or the default store).
func (ap *app) listStoreRows(cmd *cobra.Command, args []string) ([]listed, error) {
	root := strings.TrimSpace(fString(cmd, "store"))
	if root == "" && len(args) == 1 {
		root = args[0]
	}
	if err := cmd.Flags().Set("store", root); err != nil {
		return nil, err
	}
	st, err := ap.openStore(cmd.Context(), cmd)
	if err != nil {
		return nil, err
	}
	imgs, err := st.ListImages(cmd.Context())
	if err != nil {
		return nil, err
	}
	rows := make([]listed, 0, len(imgs))
	for _, i := range imgs {
		size := i.RawSize
		if size == 0 {
			size = i.Size
		}
		rows = append(rows, listed{Target: i.Ref, Kind: string(i.Kind), Name: i.Name, Checkpointed: i.Created, Size: size, GPUs: i.GPUs(), State: "image", Error: i.Error})
	}
	return rows, nil
}

// listDir inspects each entry of dir that may be a checkpoint.
func listDir(dir string) ([]listed, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, report.WithRemedy(fmt.Errorf("list checkpoints in %s: %w", dir, err), "give a directory that holds checkpoints")
	}
	var rows []listed
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !mayBeCheckpoint(p, e) {
			continue
		}
		sum, err := ociimage.InspectPath(p)
		if errors.Is(err, ociimage.ErrUnknownSource) {
			continue
		}
		if err != nil {
			rows = append(rows, listed{Target: p, Error: err.Error()})
			continue
		}
		rows = append(rows, listed{Target: p, Kind: string(sum.Kind), Name: sum.Name, Checkpointed: sum.Created,
			Size: sum.Sizes.Total, GPUs: gpuCell(sum), State: stateCell(sum)})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Target < rows[j].Target })
	return rows, nil
}

// mayBeCheckpoint picks directories and export tars by name, so that a
// directory of other files is not opened file by file.
func mayBeCheckpoint(p string, e os.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if !e.Type().IsRegular() {
		return false
	}
	for _, suf := range []string{".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd"} {
		if strings.HasSuffix(p, suf) {
			return true
		}
	}
	return false
}

func (ap *app) printListed(rows []listed) error {
	tw := tabwriter.NewWriter(ap.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tKIND\tNAME\tCHECKPOINTED\tSIZE\tGPUS\tSTATE")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t(%s)\n", termtext.EscapeControl(r.Target), termtext.EscapeControl(r.Error))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termtext.EscapeControl(r.Target), orDash(r.Kind), termtext.EscapeControl(orDash(r.Name)),
			created(r.Checkpointed), ociimage.Human(r.Size), termtext.EscapeControl(r.GPUs), r.State)
	}
	return tw.Flush()
}

// stateCell is "complete", the kind of interruption of an unfinished
// checkpoint, or that cryo's manifest is not there to say.
func stateCell(s *ociimage.Summary) string {
	switch {
	case s.Unfinished:
		return orDash(string(s.Interruption))
	case s.GPUsUnknown == ociimage.GPUsNoManifest:
		return "no-cryo-manifest"
	}
	return "complete"
}
