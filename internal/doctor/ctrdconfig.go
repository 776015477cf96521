package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"slices"
	"sort"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// The CRI plugin's runtimes live under a different plugin in each config
// schema: version 2 (containerd 1.7) and version 3 (containerd 2.x).
var criRuntimesKey = map[int64][]string{
	2: {"plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"},
	3: {"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"},
}

// criPlugins are the plugin IDs whose absence disables CRI's runtimes.
var criPlugins = []string{"io.containerd.grpc.v1.cri", "cri", "io.containerd.cri.v1.runtime"}

// cryoAnnotations are the pod annotations the shim reads
// (internal/imagerestore), which pod_annotations must pass.
var cryoAnnotations = []string{"cryo.io/checkpoint-image", "cryo.io/on-restore-failure"}

// containerdConfig is containerd's configuration as a TOML tree.
type containerdConfig struct {
	tree    map[string]any
	version int64
	source  string // where it came from, for the report
}

// criRuntime is one CRI runtime handler of type io.containerd.cryo.v2.
type criRuntime struct {
	name           string
	path           string // runtime_path
	podAnnotations []string
}

// loadContainerdConfig asks the containerd binary for its effective
// configuration (`config dump`: imports merged, a version 2 file migrated
// to version 3 by containerd 2.x), and reads the file itself when there is
// no binary or the dump fails.
func loadContainerdConfig(ctx context.Context, bin, file string) (containerdConfig, error) {
	if bin != "" {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "--config", file, "config", "dump").Output()
		if err == nil {
			return parseContainerdConfig(out, "`containerd --config "+file+" config dump`")
		}
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		// containerd runs on its defaults, which have no cryo runtime.
		return containerdConfig{tree: map[string]any{}, version: 3, source: "no " + file + ", containerd's defaults"}, nil
	}
	if err != nil {
		return containerdConfig{}, err
	}
	return parseContainerdConfig(data, file)
}

func parseContainerdConfig(data []byte, source string) (containerdConfig, error) {
	c := containerdConfig{source: source}
	if err := toml.Unmarshal(data, &c.tree); err != nil {
		return c, fmt.Errorf("%s: %w", source, err)
	}
	c.version, _ = c.tree["version"].(int64)
	if c.version < 2 {
		return c, fmt.Errorf("%s: config version %d (containerd 1.6 and older) is not supported by cryo's shim", source, c.version)
	}
	return c, nil
}

// line names the containerd release line the schema belongs to.
func (c containerdConfig) line() string {
	if c.version >= 3 {
		return "2.x"
	}
	return "1.7"
}

func (c containerdConfig) criDisabled() bool {
	disabled, _ := c.tree["disabled_plugins"].([]any)
	for _, p := range disabled {
		if s, _ := p.(string); slices.Contains(criPlugins, s) {
			return true
		}
	}
	return false
}

// cryoRuntimes lists the CRI runtime handlers of cryo's runtime type.
func (c containerdConfig) cryoRuntimes() []criRuntime {
	key := criRuntimesKey[min(c.version, 3)]
	runtimes, _ := dig(c.tree, key...).(map[string]any)
	var out []criRuntime
	for name, v := range runtimes {
		r, _ := v.(map[string]any)
		if t, _ := r["runtime_type"].(string); t != runtimeType {
			continue
		}
		entry := criRuntime{name: name}
		entry.path, _ = r["runtime_path"].(string)
		entry.podAnnotations = stringList(r["pod_annotations"])
		out = append(out, entry)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func runtimeNames(rs []criRuntime) []string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.name
	}
	return names
}

// missingAnnotations are cryo's annotations that no pattern passes;
// containerd matches them with path.Match.
func missingAnnotations(patterns []string) []string {
	var missing []string
	for _, a := range cryoAnnotations {
		if !slices.ContainsFunc(patterns, func(p string) bool { ok, _ := path.Match(p, a); return ok }) {
			missing = append(missing, a)
		}
	}
	return missing
}

// dig walks nested TOML tables; nil when a key is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// stringList converts a TOML array of strings.
func stringList(v any) []string {
	arr, _ := v.([]any)
	var out []string
	for _, a := range arr {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
