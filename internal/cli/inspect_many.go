package cli

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/termtext"
)

// inspected is one target of a several-target inspect: its summary, or
// why it has none.
type inspected struct {
	Target  string            `json:"target"`
	Summary *ociimage.Summary `json:"summary,omitempty"`
	Error   string            `json:"error,omitempty"`
}

// inspectMany is `cryo inspect A B …`: one row per checkpoint, as
// `checkpointctl show` prints several. Each target is a path or an image
// of the local store (a registry is not asked for several at once); one
// that is neither is a usage error, found before anything is printed. A
// target that cannot be read gets its row and the exit status 1.
func (ap *app) inspectMany(cmd *cobra.Command, targets []string, sec sections, asJSON bool) error {
	rows := make([]inspected, 0, len(targets))
	failed := false
	for _, t := range targets {
		sum, err := ap.inspectLocalTarget(cmd, t, sec)
		if errors.Is(err, ociimage.ErrNotFound) {
			return usageRemedy(cmd, fmt.Errorf("%s is neither a checkpoint path nor an image of the local store: several targets are read locally", t), "`cryo image pull "+t+"` first, or inspect it alone")
		}
		r := inspected{Target: t, Summary: sum}
		if err == nil {
			err = sec.apply(sum)
		}
		if err != nil {
			r.Summary, r.Error, failed = nil, err.Error(), true
		}
		rows = append(rows, r)
	}
	if asJSON {
		if err := ap.printJSON(ap.stdout, rows); err != nil {
			return err
		}
	} else if err := ap.printTable(rows); err != nil {
		return err
	}
	if failed {
		return &silentError{Code: ExitFailure}
	}
	return nil
}

// inspectLocalTarget is a path (which must exist: a *PathError), else an
// image of the local store; a missing store is ErrNotFound too (no image
// can be in it).
func (ap *app) inspectLocalTarget(cmd *cobra.Command, target string, sec sections) (*ociimage.Summary, error) {
	o := ociimage.InspectOptions{CommandLines: sec.commandLines()}
	if _, err := os.Stat(target); err == nil {
		return ociimage.InspectPathWith(target, o)
	}
	if isPath, err := resolveTarget(target); isPath || err != nil {
		return nil, err
	}
	st, err := ap.openStore(cmd.Context(), cmd)
	var missing *StoreMissingError
	if errors.As(err, &missing) {
		return nil, fmt.Errorf("%w: %v", ociimage.ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	if o.Decrypt, err = decryptOptions(cmd); err != nil {
		return nil, err
	}
	return st.InspectLocalWith(cmd.Context(), target, o)
}

// printTable writes checkpointctl show's columns, with cryo's GPU needs
// and the state of an unfinished checkpoint.
func (ap *app) printTable(rows []inspected) error {
	tw := tabwriter.NewWriter(ap.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tKIND\tNAME\tID\tRUNTIME\tCREATED\tCHECKPOINTED\tGPUS\tSIZE\tROOTFS DIFF\tSTATE")
	for _, r := range rows {
		t := termtext.EscapeControl(r.Target)
		if r.Summary == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t(%s)\n", t, termtext.EscapeControl(r.Error))
			continue
		}
		s := r.Summary
		cells := []string{string(s.Kind), orDash(s.Name), shortID(s.ContainerID), orDash(s.Runtime),
			createdCell(s), created(s.Created), gpuCell(s), ociimage.Human(s.Sizes.Total), ociimage.Human(s.Sizes.RootfsDiff), stateCell(s)}
		fmt.Fprint(tw, t)
		for _, c := range cells {
			fmt.Fprint(tw, "\t", termtext.EscapeControl(c))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// shortID is a container id cut to 12 characters, as docker and podman
// print them.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return orDash(id)
}

func createdCell(s *ociimage.Summary) string {
	if s.ContainerCreated == nil {
		return "-"
	}
	return created(*s.ContainerCreated)
}

// gpuCell is the GPU needs in a few words.
func gpuCell(s *ociimage.Summary) string {
	switch {
	case s.GPUsUnknown != "":
		return "unknown"
	case len(s.GPUs) == 0:
		return "none"
	}
	return fmt.Sprintf("%d× %s", len(s.GPUs), s.GPUs[0].Name)
}
