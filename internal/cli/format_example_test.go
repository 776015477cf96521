package cli

import (
	"bytes"
	"strings"
	"testing"
	"text/template"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/doctor"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/status"
)

// The --format example in each command's help is run on that command's
// own result type: `cryo ps --format '{{.pid}} {{.state}}'` once failed
// with "map has no entry for key", the help's example being true of no
// command. A command given --format without a sample here fails the test.
func TestFormatExamples(t *testing.T) {
	info := ociimage.ImageInfo{Ref: "app:v1", Digest: "sha256:ab"}
	samples := map[string]any{
		"cryo checkpoint":    checkpointResult{PID: 7, Dir: "/ckpt"},
		"cryo restore":       restoreResult{PID: 7, Seconds: 1.5},
		"cryo image restore": restoreResult{PID: 7},
		"cryo inspect":       ociimage.Summary{Source: "/ckpt", Kind: "checkpoint"},
		"cryo inspect list":  []listed{{Target: "/ckpt", Size: 10}},
		"cryo cuda state":    []cudaStateLine{{PID: 7, State: "running"}},
		"cryo cuda suspend":  []cudaSetResult{{PID: 7, Before: "running", After: "checkpointed"}},
		"cryo cuda resume":   []cudaSetResult{{PID: 7, Before: "checkpointed", After: "running"}},
		"cryo image ls":      []ociimage.ImageInfo{info},
		"cryo image build":   imageResult{ImageInfo: info},
		"cryo image push":    imageResult{ImageInfo: info},
		"cryo image pull":    imageResult{ImageInfo: info},
		"cryo image rm":      []removedImage{{Ref: "app:v1"}},
		"cryo version":       versionInfo{Version: "1.0", Go: "go1.24"},
		"cryo ps":            status.Report{Processes: []status.Process{{PID: 7, State: "running"}}},
		"cryo doctor":        doctor.Report{Checks: []doctor.Check{{Name: "criu", Status: doctor.OK}}},
	}
	ap := newApp(config.Config{})
	walk(ap.newRoot(), func(c *cobra.Command) {
		ex, ok := c.Annotations[formatExample]
		if !ok {
			return
		}
		if !strings.Contains(c.Flag("format").Usage, "'"+ex+"'") {
			t.Errorf("%s: --format's help does not show %q", c.CommandPath(), ex)
		}
		v, ok := samples[c.CommandPath()]
		if !ok {
			t.Errorf("%s has --format (example %q) but no sample result in this test", c.CommandPath(), ex)
			return
		}
		ap.tmpl = template.Must(template.New("format").Option("missingkey=error").Parse(ex))
		var b bytes.Buffer
		if err := ap.printJSON(&b, v); err != nil || strings.TrimSpace(b.String()) == "" || strings.Contains(b.String(), "no value") {
			t.Errorf("%s --format '%s': %q, %v", c.CommandPath(), ex, b.String(), err)
		}
	})
}

// The flag tables of help and docs read as typed: an optional value is
// "--store[=DIR]", not pflag's `--store DIR[=" "]`, and no boolean flag
// takes a backquoted phrase of its help for a value placeholder
// ("--net-host ctr run --net-host").
func TestFlagTablesPlaceholders(t *testing.T) {
	walk(newApp(config.Config{}).newRoot(), func(c *cobra.Command) {
		table := wrappedFlags(c.LocalFlags(), 100)
		if strings.Contains(table, `[="`) {
			t.Errorf("%s: a mangled optional value:\n%s", c.CommandPath(), table)
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); f.Value.Type() == "bool" && name != "" {
				t.Errorf("%s --%s: a boolean flag shows the placeholder %q", c.CommandPath(), f.Name, name)
			}
		})
	})
	l, _, _ := newApp(config.Config{}).newRoot().Find([]string{"inspect", "list"})
	if table := wrappedFlags(l.LocalFlags(), 100); !strings.Contains(table, "--store[=DIR] ") {
		t.Errorf("inspect list --store:\n%s", table)
	}
}
