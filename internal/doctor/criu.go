package doctor

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

const criuFix = "install CRIU 4.2.1: `make deps` (contrib/install-deps.sh) builds it, or set CRYO_CRIU"

// checkCRIU: without a working CRIU nothing can be checkpointed, so its
// problems fail.
func (e *env) checkCRIU(ctx context.Context) []Check {
	info, err := orchestrate.ProbeCRIU(e.cfg.CRIU)
	if err != nil {
		return []Check{
			{"criu", Fail, err.Error(), criuFix},
			{Name: "criu check", Status: Skip, Detail: "no CRIU to run"},
			{Name: "criu fill", Status: Skip, Detail: "no CRIU"},
			{Name: "criu hold", Status: Skip, Detail: "no CRIU"},
			{Name: "criu zero", Status: Skip, Detail: "no CRIU"},
			{Name: "runc criu", Status: Skip, Detail: "no CRIU"},
		}
	}
	if info.Kernel == "" || e.host.Uname != "" {
		info.Kernel = e.kernel()
	}
	res := []Check{{Name: "criu", Status: OK, Detail: info.VersionString() + " (" + info.Path + ")"}}
	if err := info.Check(); err != nil {
		res[0] = Check{"criu", Fail, err.Error(), criuFix}
	}
	return append(res, e.criuCheck(ctx, info.Path), criuFill(info.Path), criuHold(info.Path), criuZero(info.Path), criuSeccomp(info.Path), runcCRIU(e.cfg.Environ, e.cfg.CRIU, info.Path))
}

// runcCRIU: containers are dumped and restored by runc, which runs the
// `criu` it finds on PATH by name. cryo-runc and the shim put $CRYO_CRIU's
// directory first on that PATH (config.CRIUFirst); this says when runc
// would still find another CRIU, which cryo never checked. The PATH is
// this process's: a daemon's may differ, but it is the best guess here.
func runcCRIU(environ []string, configured, checked string) Check {
	path := config.Lookup(config.CRIUFirst(environ, configured), "PATH")
	if path == "" {
		path = config.DefaultPath
	}
	var found string
	if all := lookIn(filepath.SplitList(path), "criu"); len(all) > 0 {
		found = all[0]
	}
	if found != "" && sameFile(found, checked) {
		return Check{Name: "runc criu", Status: OK, Detail: "runc finds the same CRIU on PATH (" + found + ")"}
	}
	fix := "set CRYO_CRIU to " + checked + " in the environment of containerd and of cryo-runc (a path ending in /criu, which cryo puts first on runc's PATH)"
	if filepath.Base(checked) != "criu" {
		fix = "give CRYO_CRIU a path whose file is named criu (a symbolic link to " + checked + " will do): runc looks CRIU up by that name"
	}
	if found == "" {
		return Check{"runc criu", Warn, "runc finds no criu on PATH (" + path + "): containers cannot be checkpointed", fix}
	}
	return Check{"runc criu", Warn, "runc would run " + found + ", not the CRIU checked above (" + checked + "): containers would be dumped and restored with it", fix}
}

// criuBinary reads the CRIU executable behind path. The bundle's
// sbin/criu is a script that runs ../libexec/criu with the bundle's
// libraries (contrib/make-dist.sh): the patches are in that binary.
func criuBinary(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("#!")) {
		return b, err
	}
	return os.ReadFile(filepath.Join(filepath.Dir(path), "..", "libexec", filepath.Base(path)))
}

// criuFills are what cryo's CRIU patches (contrib/criu) add to a restore,
// known by the log lines that the binary carries.
var criuFills = []struct{ marker, what string }{
	{"huge-page fill: ", "huge pages"},
	{"parallel fill: ", "several threads"},
}

// criuFill: a stock CRIU restores correctly, but fills a large process's
// memory page by page from one thread, several times slower (0.35 s
// against 2.64 s for 4 GiB on an H200 host), so it only warns.
func criuFill(path string) Check {
	b, err := criuBinary(path)
	if err != nil {
		return Check{Name: "criu fill", Status: Skip, Detail: "cannot read " + path + ": " + err.Error()}
	}
	var have, lack []string
	for _, f := range criuFills {
		if bytes.Contains(b, []byte(f.marker)) {
			have = append(have, f.what)
		} else {
			lack = append(lack, f.what)
		}
	}
	if len(lack) == 0 {
		return Check{Name: "criu fill", Status: OK, Detail: "cryo's CRIU: a restore fills memory with " + strings.Join(have, " and ") + " (contrib/criu)"}
	}
	return Check{"criu fill", Warn, "this CRIU fills a restored process's memory without " + strings.Join(lack, " or ") +
		": restores of large processes are several times slower than with cryo's CRIU",
		"install cryo's CRIU (`make deps`, contrib/install-deps.sh, or the bundle's sbin/criu), or set CRYO_CRIU to it"}
}

// criuCheck runs `criu check`, which needs root: as anyone else it would
// fail for that reason alone, which the privileges check already says.
func (e *env) criuCheck(ctx context.Context, path string) Check {
	if uid, _, err := readStatus(filepath.Join(e.host.Proc, "self", "status")); err != nil || uid != 0 {
		return Check{Name: "criu check", Status: Skip, Detail: "needs root (see privileges)"}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "check").CombinedOutput()
	if err != nil {
		return Check{"criu check", Fail, lastLine(string(out)) + " (" + err.Error() + ")", "run `" + path + " check` as root and fix what it reports"}
	}
	return Check{Name: "criu check", Status: OK, Detail: lastLine(string(out))}
}

// checkRunc: the container front ends run runc; `cryo checkpoint --pid`
// does not. So a missing runc fails only where containerd or Podman is
// installed.
func (e *env) checkRunc(ctx context.Context, front frontEnds) Check {
	path, err := e.runcPath()
	if err != nil {
		fix := "install runc (Debian: apt-get install runc), or set CRYO_RUNC"
		if front.containerd.found() || front.podman != "" {
			return Check{"runc", Fail, err.Error() + ": containerd and Podman cannot run cryo's containers", fix}
		}
		return Check{"runc", Warn, err.Error() + ": only process trees (cryo checkpoint --pid) can be checkpointed", fix}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, path, "--version").Output()
	first, _, _ := strings.Cut(string(out), "\n")
	return Check{Name: "runc", Status: OK, Detail: strings.TrimSpace(first) + " (" + path + ")"}
}

// runcPath is $CRYO_RUNC, else the first runc on PATH that is not cryo
// (cryo-runc may be installed as runc).
func (e *env) runcPath() (string, error) {
	if e.cfg.Runc != "" {
		if !isExecutable(e.cfg.Runc) {
			return "", &lookupError{"CRYO_RUNC=" + e.cfg.Runc + " is not an executable file"}
		}
		return e.cfg.Runc, nil
	}
	for _, p := range e.lookAll("runc") {
		if !sameFile(p, e.self) {
			return p, nil
		}
	}
	return "", &lookupError{"runc not found on PATH (" + e.host.PATH + ")"}
}

type lookupError struct{ msg string }

func (l *lookupError) Error() string { return l.msg }

// look finds name in the search path, "" if absent.
func (e *env) look(name string) string {
	if all := e.lookAll(name); len(all) > 0 {
		return all[0]
	}
	return ""
}

// lookAll lists every executable called name on the search path, in order.
func (e *env) lookAll(name string) []string {
	return lookIn(filepath.SplitList(e.host.PATH), name)
}

func lookIn(dirs []string, name string) []string {
	var found []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if p := filepath.Join(d, name); isExecutable(p) {
			found = append(found, p)
		}
	}
	return found
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// criuHold: cryo holds a CUDA process's threads stopped from its driver
// checkpoint on, and runc's dump of such a container hangs in a CRIU
// without patch 0003 (contrib/criu), so cryo refuses those checkpoints
// with it. The patch's check feature names itself in the binary.
func criuHold(path string) Check {
	return patchCheck("criu hold", path, "cryo_seize_stopped",
		"cryo's CRIU: it dumps containers whose CUDA processes cryo holds stopped (contrib/criu, patch 0003)",
		"this CRIU would hang on a container whose CUDA processes cryo holds stopped: checkpoints of GPU containers are refused (bare `cryo checkpoint --pid` works)")
}

// criuZero: the driver's checkpoint copies GPU memory into the process's
// private memory, where an inference server's unused KV cache is zeros;
// cryo's CRIU leaves those pages out of the dump (patch 0004), another
// writes them all. The patch's check feature names itself in the binary.
func criuZero(path string) Check {
	return patchCheck("criu zero", path, "cryo_zero_pages",
		"cryo's CRIU: all-zero pages of private memory are left out of the dump (contrib/criu, patch 0004)",
		"this CRIU dumps all-zero pages: a checkpoint of mostly empty GPU memory (an unused KV cache) is as large, and as slow to write, as the memory")
}

// criuSeccomp: the check of the restored tasks compares their seccomp
// filters, as the kernel reports them, with the spec's; only CRIU, their
// tracer at pre-resume, can read them, and cryo's CRIU writes them out
// (patch 0005). Without it, every restore into a spec with seccomp is
// refused. The patch's variable names itself in the binary.
func criuSeccomp(path string) Check {
	return patchCheck("criu seccomp", path, "CRYO_CRIU_SECCOMP_DIR",
		"cryo's CRIU: it hands the restored threads' seccomp filters to the check before they run (contrib/criu, patch 0005)",
		"this CRIU cannot hand the restored threads' seccomp filters to cryo's check: every restore into a container whose spec has seccomp (Docker's, Podman's and the kubelet's RuntimeDefault profiles) is refused")
}

// patchCheck is the check named name of one of cryo's CRIU patches, known
// by its check feature's name (marker) in the binary at path: ok when
// there, else the warning warn, with the one remedy of installing cryo's
// CRIU.
func patchCheck(name, path, marker, ok, warn string) Check {
	b, err := criuBinary(path)
	if err != nil {
		return Check{Name: name, Status: Skip, Detail: "cannot read " + path + ": " + err.Error()}
	}
	if bytes.Contains(b, []byte(marker)) {
		return Check{Name: name, Status: OK, Detail: ok}
	}
	return Check{name, Warn, warn, "install cryo's CRIU (`make deps`, contrib/install-deps.sh, or the bundle's sbin/criu), or set CRYO_CRIU to it"}
}
