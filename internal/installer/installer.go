// Package installer is `cryo node install` and `cryo node uninstall`: run
// in a privileged pod of a DaemonSet with the host's root mounted, it
// copies cryo onto the host, adds cryo's runtime to the host's containerd
// through a drop-in configuration, restarts containerd only when that
// configuration changed (running containers keep running), checks the
// host with `cryo doctor`, and labels the node ready or failed through the
// Kubernetes API; uninstall reverts, byte for byte, what install changed,
// from the record install keeps on the host.
package installer

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
)

// Options say where things are. Paths other than HostRoot and Source are
// the host's own paths; the installer reaches them under HostRoot.
type Options struct {
	// HostRoot is where the host's root is mounted in the pod ("/host").
	HostRoot string
	// Source holds what the image ships: bin/cryo and, if present,
	// sbin/criu; "": the parent of the running binary's directory.
	Source string
	// Prefix is where cryo goes on the host ("/usr/local"): bin/cryo, its
	// names, and sbin/criu when the image ships one.
	Prefix string
	// ContainerdConfig is containerd's main configuration file
	// ("/etc/containerd/config.toml").
	ContainerdConfig string
	// DropIn is cryo's drop-in configuration ("/etc/containerd/conf.d/cryo.toml").
	DropIn string
	// StateDir keeps the record of what install changed
	// ("/var/lib/cryo/node-install").
	StateDir string
	// Containerd is the host's containerd binary, asked for its version
	// when the configuration does not say; "": the first of
	// /usr/bin/containerd, /usr/local/bin/containerd.
	Containerd string
	// ConfigVersion forces the drop-in's schema (2: containerd 1.7, 3:
	// containerd 2.x); 0: detected.
	ConfigVersion int
	// Restart is the host command that restarts containerd, run in the
	// host's root (chroot) and, by the default, in pid 1's namespaces.
	Restart []string
	// Socket is containerd's socket, waited for after a restart
	// ("/run/containerd/containerd.sock").
	Socket string
	// Log receives one line per step.
	Log io.Writer
}

// DefaultRestart restarts containerd through the host's systemd, from
// pid 1's namespaces: systemctl refuses to act from a chroot. containerd
// leaves its shims, and so every running container, untouched across a
// restart.
var DefaultRestart = []string{"nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid",
	"--", "systemctl", "restart", "containerd"}

// Defaults fills the empty fields of o.
func (o Options) Defaults() Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.HostRoot, "/host")
	def(&o.Prefix, "/usr/local")
	def(&o.ContainerdConfig, "/etc/containerd/config.toml")
	def(&o.DropIn, "/etc/containerd/conf.d/cryo.toml")
	def(&o.StateDir, "/var/lib/cryo/node-install")
	def(&o.Socket, "/run/containerd/containerd.sock")
	if len(o.Restart) == 0 {
		o.Restart = DefaultRestart
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// onHost is a host path as the pod sees it.
func (o Options) onHost(p string) string { return filepath.Join(o.HostRoot, p) }

func (o Options) logf(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }

// Result is what an install or uninstall did.
type Result struct {
	// Changed: containerd's configuration changed, so containerd was
	// restarted.
	Changed bool
	// Files are the host paths written or removed.
	Files []string
}

// Install copies cryo onto the host and adds its runtime to containerd;
// it restarts containerd only if the configuration changed. A second
// install (a restarted pod, an upgrade) keeps the originals recorded by
// the first, so that uninstall still restores the host as it was before
// cryo.
func Install(ctx context.Context, o Options) (Result, error) {
	o = o.Defaults()
	rec, err := loadRecord(o)
	if err != nil {
		return Result{}, err
	}
	var res Result
	if err := installFiles(o, rec, &res); err != nil {
		return res, err
	}
	changed, err := installContainerd(ctx, o, rec, &res)
	if err != nil {
		return res, err
	}
	if err := rec.save(); err != nil {
		return res, err
	}
	if changed {
		res.Changed = true
		if err := restartContainerd(ctx, o); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Uninstall reverts what Install recorded, newest change first, and
// restarts containerd if its configuration was among them. Without a
// record there is nothing of cryo's to remove.
func Uninstall(ctx context.Context, o Options) (Result, error) {
	o = o.Defaults()
	rec, err := loadRecord(o)
	if err != nil {
		return Result{}, err
	}
	if rec.empty() {
		o.logf("no install record at %s: nothing to revert", rec.path)
		return Result{}, rec.remove()
	}
	res, err := rec.revert()
	if err != nil {
		return res, err
	}
	if err := rec.remove(); err != nil {
		return res, err
	}
	if res.Changed {
		if err := restartContainerd(ctx, o); err != nil {
			return res, err
		}
	}
	return res, nil
}
