package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/termtext"
)

func (ap *app) inspectCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect TARGET...",
		Short: "summarize a checkpoint: directory, export tar, or image",
		Long: `Shows what a checkpoint holds and what restoring it needs: its kind and name,
when and where it was taken, the versions of cryo, CRIU, the kernel and the
GPU driver that took it, the CUDA processes and the GPUs a restore needs,
the sizes (GPU memory, host memory, rootfs diff) and the compression ratio,
and the digest; then, read from CRIU's own images, the process tree with
command lines, each process's open files and sockets, the mounts, the
memory dumped and CRIU's statistics (as "checkpointctl inspect" shows them).

TARGET is a checkpoint directory ("cryo checkpoint --dir"), an export tar
(Podman, CRI-O, kubelet, "cryo image export"), or a REF looked up in the
local store, then in its registry, where only the manifest is read (no layer
is pulled: the process details then need "cryo image pull").

--verify hashes every file of a directory, tar or store image against the
checkpoint's manifest (and every layer against its digest) and says which
file differs; the exit status is 1 if one does.

Several TARGETs (paths or images of the local store) print one row each in
a table, as "checkpointctl show" does; one TARGET prints it in full.

The sections can be chosen, as with "checkpointctl inspect": --ps-tree,
--files, --sockets, --mounts, --stats, --env, or --all; --pid N restricts
the process sections to one process. The environment (the processes' own,
read from their memory, and the container spec's) shows the values of
variables whose names look secret (TOKEN, SECRET, PASSWORD, KEY,
CREDENTIAL, ...) masked, unless --show-secrets. An export tar or an image
is summarised without its memory pages ([comm] shows); --ps-tree, --env or
--all read the few pages that hold the command lines and environments (a
second pass over an archive or image of up to 4 GiB). An encrypted image
of the local store has its details read with --decryption-key.

"cryo inspect list [DIR]" lists the checkpoints in a directory, and
"cryo inspect list --store" those of the image store.`,
		Example: "  cryo inspect /var/lib/ckpt/train\n  cryo inspect /var/lib/ckpt/a /var/lib/ckpt/b export.tar\n  cryo inspect --ps-tree --env --pid 1 /tmp/export.tar\n  cryo inspect --verify localhost:5000/ckpt/train:v1\n  cryo inspect --json /tmp/export.tar | jq .details.processes",
		Args:    minArgs(1),
		RunE:    ap.inspectRun,
	}
	cmd.AddCommand(ap.inspectListCommand())
	fs := cmd.Flags()
	addStoreFlag(fs)
	addRemoteFlags(fs)
	addTrustFlags(fs)
	addDecryptFlags(fs)
	fs.Bool("verify", false, "hash every file against the checkpoint's manifest and report the first that differs")
	addSectionFlags(fs)
	addFormatFlags(cmd, "{{.source}} {{.kind}}")
	return cmd
}

func (ap *app) inspectRun(cmd *cobra.Command, args []string) error {
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	// A path that is missing or unreadable says so (exit 1, or 77 for
	// permission) before anything reads inside it; with several targets,
	// its row says so (inspectMany).
	if len(args) == 1 {
		if _, err := resolveTarget(args[0]); err != nil {
			return err
		}
	}
	sec, err := sectionsOf(cmd)
	if err != nil {
		return err
	}
	if fBool(cmd, "verify") {
		if len(args) > 1 {
			return usageErrorf(cmd, "--verify checks one target at a time, got %d", len(args))
		}
		return ap.verifyTarget(cmd, args[0], asJSON)
	}
	if len(args) > 1 {
		return ap.inspectMany(cmd, args, sec, asJSON)
	}
	sum, err := ap.inspectTarget(cmd, args[0], sec)
	if err != nil {
		return err
	}
	if err := sec.apply(sum); err != nil {
		return err
	}
	if asJSON {
		return ap.printJSON(ap.stdout, sum)
	}
	printSummary(ap.stdout, sum)
	return writeSections(ap.stdout, sum, sec)
}

// verifyTarget is --verify: a path, else an image of the local store; a
// registry image must be pulled first, as its layers are what is checked.
func (ap *app) verifyTarget(cmd *cobra.Command, target string, asJSON bool) error {
	var err error
	if _, serr := os.Stat(target); serr == nil {
		err = ociimage.VerifyPath(target, os.TempDir())
	} else {
		dec, derr := decryptOptions(cmd)
		if derr != nil {
			return derr
		}
		st, serr := ap.openStore(cmd.Context(), cmd)
		if serr != nil {
			return serr
		}
		err = st.VerifyLocal(cmd.Context(), target, os.TempDir(), dec)
		if errors.Is(err, ociimage.ErrNotFound) {
			return report.WithRemedy(fmt.Errorf("%s is neither a path nor an image of the local store: %w", target, err), "`cryo image pull "+target+"`, then verify it")
		}
	}
	if asJSON {
		res := struct {
			Target   string `json:"target"`
			Verified bool   `json:"verified"`
			Error    string `json:"error,omitempty"`
		}{Target: target, Verified: err == nil}
		if err != nil {
			res.Error = err.Error()
		}
		if perr := ap.printJSON(ap.stdout, res); perr != nil {
			return perr
		}
		if err != nil {
			return &silentError{Code: ExitFailure}
		}
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(ap.stdout, "%s: verified, every file matches the checkpoint's manifest\n", target)
	return nil
}

func (ap *app) inspectTarget(cmd *cobra.Command, target string, sec sections) (*ociimage.Summary, error) {
	sum, err := ap.inspectLocalTarget(cmd, target, sec)
	if !errors.Is(err, ociimage.ErrNotFound) {
		return sum, err
	}
	// Not in the local store (or no store at all): the registry's manifest.
	ctx := cmd.Context()
	pinned, err := ap.trustVerifier(cmd, "inspect").Pin(ctx, target, ap.remoteOptions(cmd))
	if err != nil {
		return nil, err
	}
	return ociimage.InspectRemote(ctx, pinned, ap.remoteOptions(cmd))
}

// printSummary writes the summary in two aligned blocks: the head (what
// the checkpoint is, aligned as it always was, which scripts match) and
// the body (when, what it holds, its sizes).
func printSummary(w io.Writer, s *ociimage.Summary) {
	tw := tabwriter.NewWriter(w, 14, 4, 2, ' ', 0)
	defer tw.Flush()
	// The values come from annotations of any registry: escape what a
	// terminal would act on.
	row := func(k, f string, a ...any) {
		if k != "" {
			k += ":"
		}
		fmt.Fprintf(tw, "%s\t%s\n", k, termtext.EscapeControl(fmt.Sprintf(f, a...)))
	}
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
	if s.ContainerID != "" {
		row("ID", "%s", s.ContainerID)
	}
	if s.Runtime != "" {
		row("Runtime", "%s", s.Runtime)
	}
	tw.Flush()
	printBody(row, s)
}

func printBody(row func(k, f string, a ...any), s *ociimage.Summary) {
	if s.ContainerCreated != nil {
		row("Created", "%s", stamp(*s.ContainerCreated))
	}
	row("Checkpointed", "%s on %s", stamp(s.Created), orDash(s.Host))
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
	label := "Annotations"
	for _, kv := range sortedPairs(s.ContainerAnnotations) {
		row(label, "%s", kv)
		label = ""
	}
}

// stamp is a time as inspect shows it, "-" when unknown.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("2006-01-02 15:04:05 MST")
}

// sortedPairs is a map as sorted "key=value" lines.
func sortedPairs(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
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
	if s.GPUsUnknown != "" {
		return "unknown (" + s.GPUsUnknown + ")"
	}
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

// unfinishedState says what to do with a checkpoint whose cryo run did
// not finish, by what its dump left (manifest.UnfinishedState).
func unfinishedState(s *ociimage.Summary) string {
	switch {
	case s.Finishable:
		return fmt.Sprintf("interrupted after its dump, which completed: finish it with `cryo checkpoint --finish %s` (a restore finishes it too)", s.Source)
	case s.Partial != nil:
		return partialState(s)
	case s.Interruption == manifest.DumpAbandoned:
		return "abandoned after its dump completed: the run failed after it (a full disk at the last write) and gave the processes back, which ran on, so its images are stale; re-take the checkpoint"
	case s.Interruption == manifest.DumpNotStarted:
		return "interrupted before CRIU's dump completed (Ctrl-C or a failure rolled it back and the processes ran on, or cryo was killed: see `cryo help interrupted`): it holds no CRIU images; re-take the checkpoint"
	}
	return "interrupted before CRIU's dump completed: its images are partial; re-take the checkpoint"
}

// partialState words a checkpoint that failed while its processes ran on,
// whose images were removed (manifest.MarkPartial).
func partialState(s *ociimage.Summary) string {
	p := s.Partial
	kept := orDash(strings.Join(p.Kept, ", "))
	if s.Interruption == manifest.DumpStaleRemoved {
		return fmt.Sprintf("its dump completed, then the run failed at %s (%s); the processes ran on, so the dump was stale and its images were removed (logs kept: %s); re-take the checkpoint (the directory can be given to --dir again)", stamp(p.Time), p.Error, kept)
	}
	return fmt.Sprintf("failed before CRIU's dump completed, at %s (%s); the processes ran on and its images were removed (logs kept: %s); re-take the checkpoint (the directory can be given to --dir again)", stamp(p.Time), p.Error, kept)
}
