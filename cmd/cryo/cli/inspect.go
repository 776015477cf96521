package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/snapshot/ociimage"
)

func inspectCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect DIR|TAR|REF",
		Short: "summarize a checkpoint: directory, export tar, or image",
		Long: `Shows the processes, the GPUs a restore needs, the sizes (GPU memory, host
memory, rootfs diff), the compression ratio, and when and where the
checkpoint was taken. A REF is looked up in the local store, then in its
registry, where only the manifest is read: no layer is pulled.`,
		Example: "  cryo inspect /var/lib/ckpt/train\n  cryo inspect --json localhost:5000/ckpt/train:v1",
		Args:    exactArgs(1),
		RunE:    inspectRun,
	}
	addStoreFlag(cmd.Flags())
	addRemoteFlags(cmd.Flags())
	addFormatFlags(cmd)
	return cmd
}

func inspectRun(cmd *cobra.Command, args []string) error {
	asJSON, err := jsonOutput(cmd)
	if err != nil {
		return err
	}
	sum, err := inspectTarget(cmd, args[0])
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, sum)
	}
	printSummary(stdout, sum)
	return nil
}

func inspectTarget(cmd *cobra.Command, target string) (*ociimage.Summary, error) {
	if _, err := os.Stat(target); err == nil {
		return ociimage.InspectPath(target)
	}
	ctx := cmd.Context()
	st, err := openStore(ctx, cmd)
	if err != nil {
		return nil, err
	}
	sum, err := st.InspectLocal(ctx, target)
	if !errors.Is(err, ociimage.ErrNotFound) {
		return sum, err
	}
	return ociimage.InspectRemote(ctx, target, remoteOptions(cmd))
}

func printSummary(w io.Writer, s *ociimage.Summary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	// The values come from annotations of any registry: escape what a
	// terminal would act on.
	row := func(k, f string, a ...any) { fmt.Fprintf(tw, "%s:\t%s\n", k, escapeControl(fmt.Sprintf(f, a...))) }
	row("Source", "%s", s.Source)
	row("Kind", "%s", s.Kind)
	if s.Unfinished {
		row("State", "%s", unfinishedState(s))
	}
	if s.Name != "" {
		row("Name", "%s", s.Name)
	}
	if s.BaseImage != "" {
		row("Base image", "%s", s.BaseImage)
	}
	row("Created", "%s on %s", s.Created.Format("2006-01-02 15:04:05 MST"), orDash(s.Host))
	row("Processes", "%s", processList(s.Processes))
	row("GPUs", "%s", gpuList(s))
	z := s.Sizes
	row("GPU memory", "%s", ociimage.Human(z.GPUMemory))
	row("Host memory", "%s", ociimage.Human(z.HostMemory))
	row("Rootfs diff", "%s", ociimage.Human(z.RootfsDiff))
	row("Total", "%s", ociimage.Human(z.Total))
	if z.Compressed > 0 {
		row("Image", "%s in %d layers, ratio %.1f, encrypted: %v", ociimage.Human(z.Compressed), len(s.Layers), z.Ratio, s.Encrypted)
	}
	if s.Digest != "" {
		row("Digest", "%s", s.Digest)
	}
}

// escapeControl writes control characters (C0, DEL, C1: escape sequences,
// carriage returns, the tab that would break the table) and invalid UTF-8
// as Go escapes, so that a hostile annotation prints as text.
func escapeControl(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func processList(ps []ociimage.ProcessInfo) string {
	if len(ps) == 0 {
		return "-"
	}
	var parts []string
	for _, p := range ps {
		s := fmt.Sprintf("%d %s", p.PID, p.Comm)
		if p.CUDA {
			s += " (CUDA"
			if p.GPUMemory > 0 {
				s += ", " + ociimage.Human(int64(p.GPUMemory))
			}
			s += ")"
		}
		parts = append(parts, strings.TrimSpace(s))
	}
	return strings.Join(parts, "; ")
}

func gpuList(s *ociimage.Summary) string {
	if len(s.GPUs) == 0 {
		return "none needed"
	}
	g := s.GPUs[0]
	var mem uint64
	for _, n := range s.GPUs {
		mem += n.Memory
	}
	return fmt.Sprintf("%d× %s (sm %s), %s in use at checkpoint, driver %s", len(s.GPUs), g.Name, orDash(g.ComputeCapability), ociimage.Human(int64(mem)), orDash(s.Driver))
}

// unfinishedState says what to do with a checkpoint whose cryo run
// stopped after CRIU's dump.
func unfinishedState(s *ociimage.Summary) string {
	if s.Finishable {
		return fmt.Sprintf("interrupted after its dump, which completed: finish it with `cryo checkpoint --finish %s` (a restore finishes it too)", s.Source)
	}
	return "interrupted before CRIU's dump completed: its images are partial; re-take the checkpoint"
}
