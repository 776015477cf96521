// Package doctor checks whether this host can checkpoint and restore
// containers with cryo: the kernel, the privileges, CRIU and runc, the
// NVIDIA driver and its GPUs, and each front end (containerd with its CRI
// plugin, Podman with cryo-runc). `cryo doctor` renders its Report.
//
// The statuses follow one rule, so that a script can act on them:
//
//   - fail: cryo cannot checkpoint anything here (CRIU missing or too old,
//     `criu check` failing, runc missing where a container front end is
//     installed), or a front end is configured to use cryo and that
//     configuration is broken (its binary missing, an environment file that
//     cryo-runc refuses), or an NVIDIA driver is installed that cannot
//     checkpoint (no checkpoint API, a branch below 570);
//   - warn: something works, but not as well as it could, or a front end
//     that is installed is not set up for cryo yet;
//   - skip: the component is absent (no NVIDIA driver, no containerd, no
//     Podman), and cryo works without it;
//   - ok: checked and fine.
//
// A CPU-only host with CRIU and runc passes: CPU containers checkpoint and
// restore without the driver.
package doctor

import (
	"cmp"
	"context"
	"os"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/version"
)

// Options are what Run checks and where it looks. The zero Host looks at
// this host's real files; tests point it at temporary ones.
type Options struct {
	// Config is the caller's configuration (config.FromEnv): the CRIU,
	// runc and driver it names, its PATH (in Environ), and the problems it
	// found in the variables.
	Config config.Config
	// Driver is the CUDA driver to probe; nil: one built from Config.
	Driver *cuda.Driver
	// Self is the cryo binary the front ends should be: a shim or a
	// cryo-runc that is this file (or a copy of it) is cryo's own; "": the
	// running executable.
	Self string
	// ContainerdAddress limits the containerd checks to the daemon that
	// listens on this socket; "": every running containerd.
	ContainerdAddress string
	Host              Host
}

// Host names the places Run reads; empty fields take the real ones.
type Host struct {
	// Proc is procfs ("/proc"): this process's status, and the running
	// containerd daemons.
	Proc string
	// Sys is sysfs ("/sys"): cgroups and transparent huge pages.
	Sys string
	// PATH is where binaries are looked up (runc, containerd, podman,
	// cryo-runc); "": the PATH in Config.Environ.
	PATH string
	// ShimDirs are searched for containerd-shim-cryo-v2 after containerd's
	// own PATH and its binary's directory; nil: /usr/local/bin, /usr/bin.
	ShimDirs []string
	// ContainerdConfig is read when no containerd daemon runs; "":
	// /etc/containerd/config.toml.
	ContainerdConfig string
	// ContainersConf are Podman's configuration files and drop-in
	// directories in the order Podman reads them; nil: Podman's defaults.
	ContainersConf []string
	// EnvFile is cryo-runc's environment file; "": the one cryo-runc reads
	// ($CRYO_RUNC_ENV, else /etc/cryo/cryo-runc.env).
	EnvFile string
	// Uname is the kernel release; "": this kernel's.
	Uname string
}

// Run checks the host and returns the report; it never fails as a whole:
// each problem is a check. ctx bounds the commands it runs.
func Run(ctx context.Context, opts Options) Report {
	e := newEnv(opts)
	var checks []Check
	checks = append(checks, e.checkKernel(), e.checkPrivileges(), e.checkCgroups(), e.checkTHP(), e.checkCopyTimeout())
	checks = append(checks, e.checkCRIU(ctx)...)
	front := e.findFrontEnds()
	checks = append(checks, e.checkRunc(ctx, front))
	checks = append(checks, e.checkDriver(ctx)...)
	checks = append(checks, e.checkContainerd(ctx, front.containerd)...)
	checks = append(checks, e.checkAnnotationRestore(front.containerd)...)
	checks = append(checks, e.checkPodman(ctx, front.podman)...)
	checks = append(checks, checkKubernetes())
	checks = append(checks, e.checkSignaturePolicy())
	return newReport(checks)
}

// env is one run's resolved options.
type env struct {
	cfg     config.Config
	driver  *cuda.Driver
	self    string
	address string // Options.ContainerdAddress
	host    Host
}

func newEnv(opts Options) *env {
	e := &env{cfg: opts.Config, driver: opts.Driver, self: opts.Self, address: opts.ContainerdAddress, host: opts.Host}
	if e.driver == nil {
		e.driver = cuda.New(orchestrate.DriverOptions(opts.Config))
	}
	if e.self == "" {
		e.self, _ = os.Executable()
	}
	h := &e.host
	h.Proc = cmp.Or(h.Proc, "/proc")
	h.Sys = cmp.Or(h.Sys, "/sys")
	if h.PATH == "" {
		h.PATH = config.Lookup(opts.Config.Environ, "PATH")
	}
	if h.ShimDirs == nil {
		h.ShimDirs = []string{"/usr/local/bin", "/usr/bin"}
	}
	h.ContainerdConfig = cmp.Or(h.ContainerdConfig, "/etc/containerd/config.toml")
	if h.ContainersConf == nil {
		h.ContainersConf = podmanConfFiles(opts.Config.Environ, h.Proc)
	}
	if h.EnvFile == "" {
		h.EnvFile = config.EnvFilePath("")
	}
	return e
}

// cryoVersion is the version this report speaks for.
func cryoVersion() string { return version.String() }
