package installer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// installContainerd writes cryo's drop-in and makes containerd's main
// configuration import it; it reports whether either changed.
func installContainerd(ctx context.Context, o Options, rec *record, res *Result) (bool, error) {
	main, err := readMain(o)
	if err != nil {
		return false, err
	}
	version, err := schema(ctx, o, main)
	if err != nil {
		return false, err
	}
	o.logf("containerd configuration schema %d (%s)", version, o.ContainerdConfig)
	drop := DropIn(version, o.shimPath())
	if version == 2 && main.exists {
		if drop, err = dropIn17(main.data, o.shimPath()); err != nil {
			return false, stepErr("containerd config", o.ContainerdConfig, err, "add cryo's runtime by hand (contrib/containerd/config-1.7.toml)")
		}
	}
	changed, err := rec.writeFile(o.DropIn, drop, 0o644, true)
	if err != nil {
		return false, err
	}
	if changed {
		res.Files = append(res.Files, o.DropIn)
	}
	edited, err := withImport(main, version, o.ContainerdConfig, o.DropIn)
	if err != nil {
		return false, stepErr("containerd config", o.ContainerdConfig, err,
			"add "+o.DropIn+" to its imports by hand")
	}
	if main.exists && bytes.Equal(edited, main.data) {
		return changed, nil
	}
	mode := fs.FileMode(0o644)
	if main.exists {
		mode = main.mode
	}
	if _, err := rec.writeFile(o.ContainerdConfig, edited, mode, true); err != nil {
		return false, err
	}
	o.logf("added %s to the imports of %s", o.DropIn, o.ContainerdConfig)
	res.Files = append(res.Files, o.ContainerdConfig)
	return true, nil
}

func (o Options) shimPath() string { return filepath.Join(o.Prefix, "bin", "containerd-shim-cryo-v2") }

// mainConfig is containerd's main configuration file as found.
type mainConfig struct {
	exists  bool
	data    []byte
	mode    fs.FileMode
	version int
	imports []string
}

func readMain(o Options) (mainConfig, error) {
	p := o.onHost(o.ContainerdConfig)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return mainConfig{}, nil
	}
	if err != nil {
		return mainConfig{}, stepErr("containerd config", o.ContainerdConfig, err, "check the path (values: containerd.config)")
	}
	fi, err := os.Stat(p)
	if err != nil {
		return mainConfig{}, stepErr("containerd config", o.ContainerdConfig, err, "check the path (values: containerd.config)")
	}
	var top struct {
		Version int      `toml:"version"`
		Imports []string `toml:"imports"`
	}
	if err := toml.Unmarshal(data, &top); err != nil {
		return mainConfig{}, stepErr("containerd config", o.ContainerdConfig, fmt.Errorf("%w: %w", ErrConfig, err),
			"fix the file: `containerd config dump` shows what containerd reads")
	}
	return mainConfig{exists: true, data: data, mode: fi.Mode().Perm(), version: top.Version, imports: top.Imports}, nil
}

// schema is the configuration schema of the drop-in: the main file's own
// (an imported file must share it: containerd merges the files before it
// migrates the result), else what the host's containerd writes by
// default: 3 for 2.x, 2 for 1.x.
func schema(ctx context.Context, o Options, main mainConfig) (int, error) {
	if o.ConfigVersion != 0 {
		return o.ConfigVersion, nil
	}
	switch {
	case main.version == 2 || main.version == 3:
		return main.version, nil
	case main.exists:
		return 0, stepErr("containerd config", o.ContainerdConfig,
			fmt.Errorf("%w: schema version %d", ErrConfig, main.version),
			"migrate it (`containerd config migrate`) to version 2 (containerd 1.7) or 3 (2.x)")
	}
	v, err := containerdMajor(ctx, o)
	if err != nil {
		return 0, err
	}
	if v >= 2 {
		return 3, nil
	}
	return 2, nil
}

// DropIn is cryo's drop-in configuration for schema version (2:
// containerd 1.7, 3: 2.x): the runtime handler "cryo" of the RuntimeClass
// cryo, its shim at shim, the pods' cryo.io/ annotations handed to it,
// and CDI on, through which a pod's GPUs reach every runtime (the GPU
// Operator's device plugin asks for them as CDI devices).
func DropIn(version int, shim string) []byte {
	cri, esc := `'io.containerd.cri.v1.runtime'`, `'`
	if version == 2 {
		cri, esc = `"io.containerd.grpc.v1.cri"`, `"`
	}
	q := func(s string) string { return esc + s + esc }
	return fmt.Appendf(nil, `# cryo's runtime, added by `+"`cryo node install`"+`; `+"`cryo node uninstall`"+` removes it.
version = %d

[plugins.%[2]s]
  enable_cdi = true
  cdi_spec_dirs = [%[3]s, %[4]s]

[plugins.%[2]s.containerd.runtimes.cryo]
  runtime_type = %[5]s
  runtime_path = %[6]s
  pod_annotations = [%[7]s]
`, version, cri, q("/etc/cdi"), q("/var/run/cdi"), q("io.containerd.cryo.v2"), q(shim), q("cryo.io/*"))
}

// cri17 is containerd 1.7's CRI plugin.
const cri17 = "io.containerd.grpc.v1.cri"

// dropIn17 is the drop-in for containerd 1.7, whose imports replace a
// plugin's whole table rather than merge into it: the main file's CRI
// table, with cryo's runtime and CDI added, so that the node keeps every
// CRI setting of its own. An installer that starts again (a restarted
// pod, an upgrade) writes it afresh from the main file.
func dropIn17(main []byte, shim string) ([]byte, error) {
	var doc map[string]any
	if err := toml.Unmarshal(main, &doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	cri := table(table(doc, "plugins"), cri17)
	cri["enable_cdi"] = true
	cri["cdi_spec_dirs"] = []string{"/etc/cdi", "/var/run/cdi"}
	table(table(table(cri, "containerd"), "runtimes"), "cryo")["runtime_type"] = "io.containerd.cryo.v2"
	rt := table(table(table(cri, "containerd"), "runtimes"), "cryo")
	rt["runtime_path"] = shim
	rt["pod_annotations"] = []string{"cryo.io/*"}
	body, err := toml.Marshal(map[string]any{"version": 2, "plugins": map[string]any{cri17: cri}})
	if err != nil {
		return nil, err
	}
	head := "# cryo's runtime, added by `cryo node install`; `cryo node uninstall` removes it.\n" +
		"# containerd 1.7 replaces a plugin's table with an imported one: this is the\n" +
		"# main file's CRI table with cryo's runtime and CDI added.\n"
	return append([]byte(head), body...), nil
}

// table is m[key] as a table, made if missing.
func table(m map[string]any, key string) map[string]any {
	t, ok := m[key].(map[string]any)
	if !ok {
		t = map[string]any{}
		m[key] = t
	}
	return t
}

var (
	importsLine = regexp.MustCompile(`(?m)^[ \t]*imports[ \t]*=[ \t]*\[`)
	versionLine = regexp.MustCompile(`(?m)^[ \t]*version[ \t]*=[ \t]*[0-9]+[ \t]*(#.*)?\n`)
)

// withImport is the main configuration with dropIn among its imports:
// the bytes unchanged if an import (a path or a glob, relative to the
// file's directory) already names it; otherwise the path added to the
// existing list, or an imports line added after the version line, so that
// everything else in the file stays byte for byte. The edit is parsed
// again to check that it says what was meant.
func withImport(main mainConfig, version int, config, dropIn string) ([]byte, error) {
	for _, imp := range main.imports {
		if !filepath.IsAbs(imp) {
			imp = filepath.Join(filepath.Dir(config), imp)
		}
		if ok, _ := filepath.Match(imp, dropIn); ok {
			return main.data, nil
		}
	}
	entry := fmt.Sprintf("%q", dropIn)
	var out []byte
	switch {
	case !main.exists:
		out = fmt.Appendf(nil, "version = %d\nimports = [%s]\n", version, entry)
	case importsLine.Match(main.data):
		loc := importsLine.FindIndex(main.data)
		sep := ", "
		if rest := strings.TrimLeft(string(main.data[loc[1]:]), " \t\r\n"); strings.HasPrefix(rest, "]") {
			sep = ""
		}
		out = append(append(append([]byte{}, main.data[:loc[1]]...), entry+sep...), main.data[loc[1]:]...)
	case versionLine.Match(main.data):
		loc := versionLine.FindIndex(main.data)
		out = append(append(append([]byte{}, main.data[:loc[1]]...), "imports = ["+entry+"]\n"...), main.data[loc[1]:]...)
	default:
		return nil, fmt.Errorf("%w: no top-level version line to put imports after", ErrConfig)
	}
	return out, checkImport(main, out, dropIn)
}

// checkImport parses the edited file: it must import dropIn, and apart
// from imports say what the original said.
func checkImport(main mainConfig, edited []byte, dropIn string) error {
	var before, after map[string]any
	if err := toml.Unmarshal(edited, &after); err != nil {
		return fmt.Errorf("%w: the edited file does not parse: %w", ErrConfig, err)
	}
	if main.exists {
		if err := toml.Unmarshal(main.data, &before); err != nil {
			return err
		}
	}
	imps, _ := after["imports"].([]any)
	if len(imps) == 0 || imps[0] != dropIn {
		return fmt.Errorf("%w: the edit did not add %s to imports", ErrConfig, dropIn)
	}
	delete(after, "imports")
	delete(before, "imports")
	delete(after, "version")
	delete(before, "version")
	a, _ := toml.Marshal(after)
	b, _ := toml.Marshal(before)
	if !bytes.Equal(a, b) {
		return fmt.Errorf("%w: the edit changed more than imports", ErrConfig)
	}
	return nil
}
