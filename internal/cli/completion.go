package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/status"
)

// Dynamic shell completion: pids of CUDA processes, references of the
// local store, and --format values. Completion runs on every TAB, so it
// never calls the driver and never opens the store (OpenStore clears a
// pull's ingest directory): it reads /proc and the store's index.json.

// registerCompletions gives the commands that take a pid or a store
// reference their completion, by path, so that the commands' own files
// need not know about it. It uses gen-docs's walk: hidden commands take
// neither.
func (ap *app) registerCompletions(root *cobra.Command) {
	pids := []string{"cuda state", "cuda suspend", "cuda resume"}
	refs := []string{"image restore", "image push", "image rm", "image export", "image unpack", "inspect"}
	walk(root, func(c *cobra.Command) {
		path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
		switch {
		case slices.Contains(pids, path):
			c.ValidArgsFunction = completePIDs
		case slices.Contains(refs, path):
			c.ValidArgsFunction = ap.completeRefs
		}
		if c.Flags().Lookup("pid") != nil {
			_ = c.RegisterFlagCompletionFunc("pid", completePIDs)
		}
	})
}

// completeFormat offers the values --format takes.
func completeFormat(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return []string{"text\thuman-readable", "json\tone JSON document"}, cobra.ShellCompDirectiveNoFileComp
}

// completePIDs offers the processes that map libcuda, with their command
// names, leaving out those already given.
func completePIDs(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	pids, err := status.CUDAPIDs()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, pid := range pids {
		s := strconv.Itoa(pid)
		if !slices.Contains(args, s) {
			out = append(out, s+"\t"+procfs.Comm(pid))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeRefs offers the references of the store (--store or the
// default). inspect and export also take paths: files are completed there
// too.
func (ap *app) completeRefs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	dir := cobra.ShellCompDirectiveNoFileComp
	switch cmd.Name() {
	case "inspect":
		dir = cobra.ShellCompDirectiveDefault
	case "push", "restore":
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
	case "unpack", "export":
		// REF (or for export a checkpoint directory), then a path.
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveDefault
		}
		dir = cobra.ShellCompDirectiveDefault
	}
	var out []string
	for _, r := range storeRefs(ap.storeRoot(cmd)) {
		if !slices.Contains(args, r) {
			out = append(out, r)
		}
	}
	return out, dir
}

// storeRefs reads the references of the OCI layout at root from its
// index.json, without opening the store; none if it cannot be read.
func storeRefs(root string) []string {
	b, err := os.ReadFile(filepath.Join(root, "index.json"))
	if err != nil {
		return nil
	}
	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if json.Unmarshal(b, &idx) != nil {
		return nil
	}
	var refs []string
	for _, m := range idx.Manifests {
		if r := m.Annotations["org.opencontainers.image.ref.name"]; r != "" && !slices.Contains(refs, r) {
			refs = append(refs, r)
		}
	}
	slices.Sort(refs)
	return refs
}
