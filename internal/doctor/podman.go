package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/cryo-gpu/cryo/internal/config"
)

const (
	wrapperBinary = "cryo-runc"
	noPodman      = "Podman not installed (not on PATH)"
	podmanConfFix = "copy contrib/podman/containers.conf to /etc/containers/containers.conf.d/cryo.conf"
)

// podmanConfFiles are the files and drop-in directories Podman reads, in
// its order: $CONTAINERS_CONF alone if set; else the distribution's, the
// administrator's, and for a user other than root the user's.
func podmanConfFiles(environ []string, proc string) []string {
	if f := config.Lookup(environ, "CONTAINERS_CONF"); f != "" {
		return []string{f}
	}
	files := []string{
		"/usr/share/containers/containers.conf", "/usr/share/containers/containers.conf.d",
		"/etc/containers/containers.conf", "/etc/containers/containers.conf.d",
	}
	if uid, _, err := readStatus(filepath.Join(proc, "self", "status")); err == nil && uid != 0 {
		dir := config.Lookup(environ, "XDG_CONFIG_HOME")
		if dir == "" {
			dir = filepath.Join(config.Lookup(environ, "HOME"), ".config")
		}
		files = append(files, filepath.Join(dir, "containers/containers.conf"), filepath.Join(dir, "containers/containers.conf.d"))
	}
	return files
}

// checkPodman checks cryo-runc on PATH, Podman's runtime entry for it, and
// cryo-runc's environment file.
func (e *env) checkPodman(ctx context.Context, podman string) []Check {
	if podman == "" {
		return []Check{
			{Name: "cryo-runc", Status: Skip, Detail: noPodman},
			{Name: "podman runtime", Status: Skip, Detail: noPodman},
			e.checkEnvFile(false),
		}
	}
	return []Check{e.checkWrapper(ctx), e.checkPodmanRuntime(ctx), e.checkEnvFile(true)}
}

// checkWrapper: cryo-runc is installed where contrib/podman's runtime entry
// names it. Podman does not look a runtime up on PATH: `podman --runtime
// cryo-runc` fails ("default OCI runtime \"cryo-runc\" not found") even
// with cryo-runc on PATH; it takes a name of containers.conf or a full
// path, and the detail says the full path that works.
func (e *env) checkWrapper(ctx context.Context) Check {
	p := e.look(wrapperBinary)
	fix := "ln -s " + e.self + " /usr/local/bin/" + wrapperBinary
	if p == "" {
		return Check{wrapperBinary, Warn, wrapperBinary + " not on PATH (contrib/podman/containers.conf names /usr/local/bin/" + wrapperBinary + ")", fix}
	}
	what, ours := e.identify(ctx, p)
	if !ours {
		return Check{wrapperBinary, Warn, what, "ln -sf " + e.self + " " + p}
	}
	return Check{Name: wrapperBinary, Status: OK, Detail: what + "; by path: `podman --runtime " + p + "`"}
}

// podmanRuntimes is Podman's merged [engine] configuration: runtime names
// to their candidate paths, and the default runtime.
type podmanRuntimes struct {
	paths   map[string][]string
	from    map[string]string // the file that set each runtime
	dflt    string
	read    []string
	problem error
}

func (e *env) readPodmanConf() podmanRuntimes {
	pr := podmanRuntimes{paths: map[string][]string{}, from: map[string]string{}}
	for _, f := range expandConf(e.host.ContainersConf) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var conf struct {
			Engine struct {
				Runtime  string              `toml:"runtime"`
				Runtimes map[string][]string `toml:"runtimes"`
			} `toml:"engine"`
		}
		if err := toml.Unmarshal(data, &conf); err != nil {
			pr.problem = fmt.Errorf("%s: %w", f, err)
			continue
		}
		pr.read = append(pr.read, f)
		for name, paths := range conf.Engine.Runtimes {
			pr.paths[name], pr.from[name] = paths, f
		}
		if conf.Engine.Runtime != "" {
			pr.dflt = conf.Engine.Runtime
		}
	}
	return pr
}

// expandConf replaces each drop-in directory by its *.conf files, sorted.
func expandConf(entries []string) []string {
	var out []string
	for _, p := range entries {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			matches, _ := filepath.Glob(filepath.Join(p, "*.conf"))
			sort.Strings(matches)
			out = append(out, matches...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// cryoRuntime is the runtime entry that names cryo-runc (by name, or a
// path that is this cryo); "" if none.
func (pr podmanRuntimes) cryoRuntime(self string) string {
	names := make([]string, 0, len(pr.paths))
	for n := range pr.paths {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, p := range pr.paths[n] {
			if filepath.Base(p) == wrapperBinary || sameFile(p, self) {
				return n
			}
		}
	}
	return ""
}

// checkPodmanRuntime: `podman --runtime cryo` needs an [engine.runtimes]
// entry; Podman runs the first of its paths that exists, so an entry whose
// paths all miss breaks every container that names it.
func (e *env) checkPodmanRuntime(ctx context.Context) Check {
	pr := e.readPodmanConf()
	name := pr.cryoRuntime(e.self)
	if name == "" {
		detail := "no [engine.runtimes] entry for " + wrapperBinary + " in " + orNone(pr.read)
		if pr.problem != nil {
			detail += "; unreadable: " + pr.problem.Error()
		}
		works := "only a full path works (`podman --runtime /usr/local/bin/" + wrapperBinary + "`)"
		if p := e.look(wrapperBinary); p != "" {
			works = "only `podman --runtime " + p + "` works (Podman does not look runtimes up on PATH)"
		}
		return Check{"podman runtime", Warn, detail + ": " + works, podmanConfFix + ", then use `podman --runtime cryo`"}
	}
	where := fmt.Sprintf("runtime %q (%s)", name, pr.from[name])
	if pr.dflt == name {
		where += ", Podman's default runtime"
	}
	for _, p := range pr.paths[name] {
		if !isExecutable(p) {
			continue
		}
		what, ours := e.identify(ctx, p)
		if !ours {
			return Check{"podman runtime", Warn, where + " runs " + what, "ln -sf " + e.self + " " + p}
		}
		return Check{Name: "podman runtime", Status: OK, Detail: where + " runs " + what + ": `podman --runtime " + name + "`"}
	}
	return Check{"podman runtime", Fail, where + ": none of " + strings.Join(pr.paths[name], ", ") + " exists: `podman --runtime " + name + "` fails",
		"ln -s " + e.self + " " + firstOr(pr.paths[name], "/usr/local/bin/"+wrapperBinary)}
}

// checkEnvFile checks the environment file cryo-runc reads; Podman starts
// it with an almost empty environment, so its settings come from there. A
// file cryo-runc cannot parse, or a CRYO_RUNC that does not exist, makes
// every cryo-runc call fail: that fails. Without Podman the file still
// matters to anything else that runs cryo-runc (containerd's runc.v2 with
// BinaryName, CRI-O).
func (e *env) checkEnvFile(podman bool) Check {
	path := e.host.EnvFile
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if !podman {
			return Check{Name: "cryo-runc env", Status: Skip, Detail: "no " + path + " (and no Podman)"}
		}
		return Check{Name: "cryo-runc env", Status: OK, Detail: "no " + path + ": cryo-runc uses its caller's environment and finds runc and criu on a default PATH"}
	}
	c, err := config.LoadFile(path)
	if err != nil {
		return Check{"cryo-runc env", Fail, err.Error() + ": cryo-runc refuses every call", "fix " + path + " (contrib/podman/cryo-runc.env shows its form)"}
	}
	if c.Runc != "" && !isExecutable(c.Runc) {
		return Check{"cryo-runc env", Fail, path + ": " + config.EnvRunc + "=" + c.Runc + " is not an executable file: cryo-runc cannot run any container",
			"set " + config.EnvRunc + " in " + path + " to runc's absolute path, or remove it"}
	}
	var problems []string
	for _, p := range c.Problems {
		problems = append(problems, p.Error())
	}
	for k, v := range map[string]string{config.EnvCRIU: c.CRIU, config.EnvLibCUDA: c.LibCUDA, config.EnvLibNVML: c.LibNVML, config.EnvCRIUAction: c.CRIUAction} {
		if filepath.IsAbs(v) && !exists(v) {
			problems = append(problems, k+"="+v+" does not exist")
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return Check{"cryo-runc env", Warn, path + ": " + strings.Join(problems, "; "), "fix " + path}
	}
	return Check{Name: "cryo-runc env", Status: OK, Detail: path + " sets " + orNone(setKeys(c.Environ))}
}

func setKeys(environ []string) []string {
	var keys []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	return keys
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "nothing"
	}
	return strings.Join(list, ", ")
}

func firstOr(list []string, def string) string {
	if len(list) > 0 {
		return list[0]
	}
	return def
}
