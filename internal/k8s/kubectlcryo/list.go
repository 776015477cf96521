package kubectlcryo

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/internal/progress"
)

func listCommand(e *env) *cobra.Command {
	var asJSON, all bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list the Checkpoints of the namespace",
		Long: `Lists the namespace's Checkpoints (all namespaces with -A): the source pod
and container, the phase and progress, the node, the image by digest and
its size, and the age. --json prints the Checkpoint objects as a JSON list.`,
		Example: "  kubectl cryo ls\n  kubectl cryo ls -A --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.list(cmd.Context(), all, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the Checkpoints as JSON")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list the Checkpoints of every namespace")
	return cmd
}

func (e *env) list(ctx context.Context, all, asJSON bool) error {
	l := &cryov1.CheckpointList{}
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(e.ns))
	}
	if err := e.c.List(ctx, l, opts...); err != nil {
		return fmt.Errorf("list Checkpoints: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(l.Items)
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	head := "NAME\tPOD\tCONTAINER\tPHASE\tPROGRESS\tNODE\tIMAGE\tSIZE\tAGE"
	if all {
		head = "NAMESPACE\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, cp := range l.Items {
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%d%%\t%s\t%s\t%s\t%s", cp.Name, cp.Spec.PodName, cp.Spec.Container,
			orDash(string(cp.Status.Phase)), cp.Status.Progress, orDash(cp.Status.Node), orDash(cp.Status.Image),
			sizeOf(cp.Status.ImageSize), duration.HumanDuration(time.Since(cp.CreationTimestamp.Time)))
		if all {
			row = cp.Namespace + "\t" + row
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sizeOf(n int64) string {
	if n == 0 {
		return "-"
	}
	return progress.Human(n)
}
