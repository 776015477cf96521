// Package agent is cryo's Kubernetes node agent, `cryo-k8s agent`: run by
// the Helm chart's DaemonSet on every cryo-ready node, it takes the
// Checkpoints assigned to its node (status.node), checkpoints the pod's
// container through the kubelet's checkpoint API with its own
// ServiceAccount token, builds the runnable checkpoint image from the
// kubelet's archive, pushes it with the Checkpoint's push Secret, and
// records the outcome and its progress in the Checkpoint's status.
package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
)

// Options are the agent's flags.
type Options struct {
	Node        string // this node's name ($NODE_NAME, from the downward API)
	Kubeconfig  string // "": in-cluster
	KubeletHost string // the kubelet's address ($HOST_IP, else Node)
	KubeletPort int
	KubeletCA   string // the CA that signed the kubelet's serving certificate
	WorkDir     string
	ArchiveDir  string
	Health      string // the health probe's address; "0": none
}

func parse(args []string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("cryo-k8s agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Node, "node", os.Getenv("NODE_NAME"), "this node's `NAME` (default $NODE_NAME)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig `FILE` with the agent's ServiceAccount token (default: in-cluster)")
	fs.StringVar(&o.KubeletHost, "kubelet-host", os.Getenv("HOST_IP"), "the kubelet's `ADDRESS`, as its serving certificate names it (default $HOST_IP, else --node)")
	fs.IntVar(&o.KubeletPort, "kubelet-port", 10250, "the kubelet's `PORT`")
	fs.StringVar(&o.KubeletCA, "kubelet-ca", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "the `FILE` of CA certificates the kubelet's serving certificate must chain to")
	fs.StringVar(&o.WorkDir, "work-dir", "/var/lib/cryo/agent", "`DIR` for each checkpoint's work, removed after it")
	fs.StringVar(&o.ArchiveDir, "archive-dir", "/var/lib/kubelet/checkpoints", "the kubelet's checkpoints `DIR`, as mounted in the agent")
	fs.StringVar(&o.Health, "health-addr", "0", "`ADDRESS` of /healthz and /readyz (0: none)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.Node == "" {
		return o, errors.New("no node name: pass --node or set NODE_NAME (the chart sets it from spec.nodeName)")
	}
	if o.KubeletHost == "" {
		o.KubeletHost = o.Node
	}
	return o, nil
}

// Main runs `cryo-k8s agent ARGS` until SIGTERM or SIGINT.
func Main(args []string) int {
	o, err := parse(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		err = Run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cryo-k8s agent:", err)
		return 1
	}
	return 0
}

// Run runs the agent's manager until ctx ends.
func Run(ctx context.Context, o Options) error {
	ctrl.SetLogger(zap.New())
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	kl, err := NewKubelet(o.KubeletHost, o.KubeletPort, o.KubeletCA, tokenOf(cfg))
	if err != nil {
		return err
	}
	mgr, err := newManager(cfg, o)
	if err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), Secrets: mgr.GetAPIReader(), Events: mgr.GetEventRecorder("cryo-agent"),
		Node: o.Node, Kubelet: kl, WorkRoot: o.WorkDir, ArchiveDir: o.ArchiveDir}
	mine := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		cp, ok := obj.(*cryov1.Checkpoint)
		return ok && cp.Status.Node == o.Node
	})
	err = ctrl.NewControllerManagedBy(mgr).Named("cryo-agent").
		For(&cryov1.Checkpoint{}, builder.WithPredicates(mine)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).Complete(r)
	if err != nil {
		return err
	}
	if o.Health != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}

func newManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := cryov1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: o.Health,
		// Secrets are read one by one, by the name a Checkpoint gives,
		// never cached: a cache would list and watch them all.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
}

// restConfig is the in-cluster configuration, or a kubeconfig's.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// ErrNoToken is a configuration without a bearer token.
var ErrNoToken = errors.New("the agent's API credentials hold no ServiceAccount token")

// tokenOf reads the agent's own bearer token for the kubelet: the token
// file for each call (projected tokens rotate), or the configuration's
// token. A client certificate is never sent to the kubelet: the
// kubelet's authorization of nodes/checkpoint is meant for the agent's
// ServiceAccount, not for whatever identity a certificate carries.
func tokenOf(cfg *rest.Config) func() (string, error) {
	return func() (string, error) {
		if cfg.BearerTokenFile != "" {
			b, err := os.ReadFile(cfg.BearerTokenFile)
			return strings.TrimSpace(string(b)), err
		}
		if cfg.BearerToken != "" {
			return cfg.BearerToken, nil
		}
		return "", fmt.Errorf("%w: run it in its pod, or give a kubeconfig with the token of its ServiceAccount", ErrNoToken)
	}
}
