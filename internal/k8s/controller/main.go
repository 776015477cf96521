package controller

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Usage is the controller's help.
const Usage = `usage: cryo-k8s controller [flags]

Runs cryo's Checkpoint controller and serves its admission webhooks (the
Checkpoint webhook, which checks and records who asks, and the pod
webhook, which starts pods annotated cryo.io/restore-from from their
checkpoint). The Helm chart runs it as a Deployment.
`

// Main runs `cryo-k8s controller …` on args (after "controller").
func Main(args []string) int {
	fs := flag.NewFlagSet("cryo-k8s controller", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, Usage); fs.PrintDefaults() }
	var o Options
	kubeconfig := fs.String("kubeconfig", "", "a kubeconfig; default: the pod's service account")
	fs.StringVar(&o.WebhookHost, "webhook-host", "", "the webhooks' listening address")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "the webhooks' port")
	fs.StringVar(&o.CertDir, "cert-dir", "/etc/cryo/webhook", "the directory of the serving certificate (tls.crt, tls.key)")
	fs.StringVar(&o.RuntimeClass, "runtime-class", "cryo", "the RuntimeClass of restored pods")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "0", "the metrics' address; 0: off")
	fs.StringVar(&o.ProbeAddr, "probe-addr", ":8081", "the health probes' address (/healthz, /readyz); 0: off")
	fs.BoolVar(&o.LeaderElection, "leader-elect", false, "elect one controller among several replicas")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "the namespace of the election's Lease ($POD_NAMESPACE)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil)))
	cfg, err := config(*kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cryo-k8s controller: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := Run(ctx, cfg, o); err != nil {
		fmt.Fprintf(os.Stderr, "cryo-k8s controller: %v\n", err)
		return 1
	}
	return 0
}

func config(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a pod: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}
