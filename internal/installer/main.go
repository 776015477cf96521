package installer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Usage is the node installer's help.
const Usage = `usage: cryo node install|uninstall [flags]

install copies cryo onto the host mounted at --host-root, adds cryo's
runtime to containerd through a drop-in, restarts containerd if that
changed, runs "cryo doctor" on the host and labels the node
cryo.io/runtime=ready (or =failed, the reason in an event). With --wait it
then stays, trying a failed install again every --retry, and when it is
stopped because its DaemonSet is gone (helm uninstall), it reverts the
node. uninstall reverts what install recorded, byte for byte.
`

// Main runs `cryo node …` on args (after "node"); it returns the exit code.
func Main(args []string) int {
	if len(args) == 0 || (args[0] != "install" && args[0] != "uninstall") {
		fmt.Fprint(os.Stderr, Usage)
		return 2
	}
	cmd, flags := args[0], parseFlags(args[0], args[1:])
	if flags == nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if cmd == "uninstall" {
		return flags.uninstall(context.Background())
	}
	return flags.install(ctx)
}

// cmdFlags are the command line of `cryo node`.
type cmdFlags struct {
	o                     Options
	restart               string
	retry                 time.Duration
	node, ds, ns          string
	label, wait, noDoctor bool
}

func parseFlags(name string, args []string) *cmdFlags {
	f := &cmdFlags{}
	fs := flag.NewFlagSet("cryo node "+name, flag.ContinueOnError)
	fs.StringVar(&f.o.HostRoot, "host-root", "/host", "where the host's root is mounted")
	fs.StringVar(&f.o.Source, "source", "", "the directory holding bin/cryo (and sbin/criu) to copy; default: this binary's")
	fs.StringVar(&f.o.Prefix, "prefix", "/usr/local", "where cryo goes on the host")
	fs.StringVar(&f.o.ContainerdConfig, "containerd-config", "/etc/containerd/config.toml", "containerd's main configuration on the host")
	fs.StringVar(&f.o.DropIn, "drop-in", "/etc/containerd/conf.d/cryo.toml", "cryo's drop-in configuration on the host")
	fs.StringVar(&f.o.StateDir, "state-dir", "/var/lib/cryo/node-install", "where the record of the changes is kept on the host")
	fs.StringVar(&f.o.Containerd, "containerd", "", "the host's containerd binary, asked for its version")
	fs.IntVar(&f.o.ConfigVersion, "config-version", 0, "the drop-in's schema: 2 (containerd 1.7) or 3 (2.x); 0: detected")
	fs.StringVar(&f.o.Socket, "socket", "/run/containerd/containerd.sock", "containerd's socket on the host")
	fs.StringVar(&f.restart, "restart", "", "a shell command (run by the host's /bin/sh) that restarts containerd; default: systemctl restart containerd in pid 1's namespaces")
	fs.StringVar(&f.node, "node", os.Getenv("NODE_NAME"), "this node's name ($NODE_NAME)")
	fs.StringVar(&f.ds, "daemonset", os.Getenv("DAEMONSET_NAME"), "the DaemonSet of this pod ($DAEMONSET_NAME), for --wait")
	fs.StringVar(&f.ns, "namespace", os.Getenv("POD_NAMESPACE"), "this pod's namespace ($POD_NAMESPACE)")
	fs.BoolVar(&f.label, "label", true, "label the node through the API (needs --node and the pod's service account)")
	fs.BoolVar(&f.noDoctor, "no-doctor", false, "do not run cryo doctor after install")
	fs.BoolVar(&f.wait, "wait", false, "install: stay until stopped, then revert the node if the DaemonSet is gone")
	fs.DurationVar(&f.retry, "retry", time.Minute, "with --wait: after a failed install, try again this often (0: never)")
	if err := fs.Parse(args); err != nil {
		return nil
	}
	if f.restart != "" {
		f.o.Restart = []string{"/bin/sh", "-c", f.restart}
	}
	f.o.Log = logWriter{}
	return f
}

// logWriter prints the installer's lines with a time, for the pod's log.
type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	fmt.Fprintf(os.Stderr, "%s %s", time.Now().UTC().Format(time.RFC3339), p)
	return len(p), nil
}

func (f *cmdFlags) logf(format string, args ...any) { fmt.Fprintf(f.o.Log, format+"\n", args...) }

// api is the node through the API, or nil when labels are off.
func (f *cmdFlags) api() (*Node, error) {
	if !f.label {
		return nil, nil
	}
	if f.node == "" {
		return nil, stepErr("label", "node", errors.New("no node name"), "set NODE_NAME from the downward API (spec.nodeName) or give --node, or --label=false")
	}
	return InCluster(f.node)
}

func (f *cmdFlags) install(ctx context.Context) int {
	n, err := f.api()
	if err != nil {
		f.logf("%v", err)
		return 1
	}
	if n != nil {
		// A label left by an earlier release must not draw cryo pods to
		// the node while it installs.
		f.report(n.Label(context.Background(), "installing"))
	}
	code, failure := f.attempt(n, "")
	if !f.wait {
		return code
	}
	var gone <-chan struct{}
	if n != nil && f.ds != "" {
		wctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		gone = n.WatchGone(wctx, f.ns, f.ds)
	}
	for {
		select {
		case <-gone:
			f.logf("DaemonSet %s/%s deleted: removing the node's label", f.ns, f.ds)
			f.report(n.Label(context.Background(), ""))
			<-ctx.Done()
			return f.uninstallWith(nil) // the label went already
		case <-ctx.Done():
			return f.stopped(n)
		case <-f.retryAfter(code):
			f.logf("trying the install again (--retry %s)", f.retry)
			code, failure = f.attempt(n, failure)
		}
	}
}

// attempt installs and runs the doctor, labels the node and says what
// happened; it returns the exit code and the failure's message ("" if
// none). A failure whose message is last's is not reported again in an
// event: a node that keeps failing for one cause gets one event.
func (f *cmdFlags) attempt(n *Node, last string) (int, string) {
	res, err := Install(context.Background(), f.o)
	if err == nil && !f.noDoctor {
		err = Doctor(context.Background(), f.o)
	}
	if err != nil && err.Error() == last {
		f.logf("install failed again: %v", err)
		return 1, last
	}
	code := f.verdict(n, res, err)
	if err != nil {
		return code, err.Error()
	}
	return code, ""
}

// retryAfter is a channel that fires once --retry after a failed install
// (code not 0), or nil: a node whose cause is fixed (a file moved aside,
// containerd back) becomes ready without a new pod.
func (f *cmdFlags) retryAfter(code int) <-chan time.Time {
	if code == 0 || f.retry <= 0 {
		return nil
	}
	return time.After(f.retry)
}

// verdict labels the node after an install and says what happened.
func (f *cmdFlags) verdict(n *Node, res Result, err error) int {
	bg := context.Background()
	if err != nil {
		f.logf("install failed: %v", err)
		if n != nil {
			f.report(n.Label(bg, "failed"))
			f.report(n.Event(bg, true, "CryoInstallFailed", err.Error()))
		}
		return 1
	}
	f.logf("installed (%d path(s) written, containerd restarted: %v)", len(res.Files), res.Changed)
	if n != nil {
		if err := n.Label(bg, "ready"); err != nil {
			f.logf("%v", err)
			return 1
		}
		f.report(n.Event(bg, false, "CryoReady", "cryo installed and cryo doctor passed: "+LabelRuntime+"=ready"))
		f.logf("labelled node %s %s=ready", n.Name, LabelRuntime)
	}
	return 0
}

// stopped decides, once the pod is told to stop, whether the node keeps
// cryo: it does while the DaemonSet lives (a rollout replaces this pod).
func (f *cmdFlags) stopped(n *Node) int {
	bg := context.Background()
	if n != nil && f.ds != "" {
		live, err := n.DaemonSetLive(bg, f.ns, f.ds)
		switch {
		case status(err) == http.StatusUnauthorized || status(err) == http.StatusForbidden:
			// helm uninstall deletes the DaemonSet first and then this
			// pod's service account and roles, before the garbage
			// collector stops the pod: a token that no longer counts
			// means the release is gone.
			f.logf("%v: the release's service account is gone; reverting the node", err)
			return f.uninstallWith(n)
		case err != nil:
			f.logf("%v; keeping cryo on the node", err)
			return 1
		}
		if live {
			f.logf("stopped while DaemonSet %s/%s lives: the node keeps cryo", f.ns, f.ds)
			return 0
		}
		f.logf("DaemonSet %s/%s is gone: reverting the node", f.ns, f.ds)
	}
	return f.uninstallWith(n)
}

func (f *cmdFlags) uninstall(context.Context) int {
	n, err := f.api()
	if err != nil {
		f.logf("%v", err)
		return 1
	}
	return f.uninstallWith(n)
}

// uninstallWith removes the label first, so that no new cryo pod lands
// here, then reverts the files and restarts containerd.
func (f *cmdFlags) uninstallWith(n *Node) int {
	bg := context.Background()
	if n != nil {
		if err := n.Label(bg, ""); err != nil {
			f.logf("%v", err)
		}
	}
	res, err := Uninstall(bg, f.o)
	if err != nil {
		f.logf("uninstall failed: %v", err)
		return 1
	}
	f.logf("reverted %d path(s): %s (containerd restarted: %v)", len(res.Files), strings.Join(res.Files, " "), res.Changed)
	return 0
}

func (f *cmdFlags) report(err error) {
	if err != nil {
		f.logf("%v", err)
	}
}
