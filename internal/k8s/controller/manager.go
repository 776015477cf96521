package controller

import (
	"context"
	"fmt"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/internal/k8s/controller/admission"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Options configure the process.
type Options struct {
	// WebhookHost and WebhookPort are where the webhooks listen; CertDir
	// holds their serving certificate, tls.crt and tls.key.
	WebhookHost string
	WebhookPort int
	CertDir     string
	// RuntimeClass is what a restored pod runs under.
	RuntimeClass string
	// MetricsAddr and ProbeAddr: "0" turns either off.
	MetricsAddr string
	ProbeAddr   string
	// LeaderElection lets one replica of several run the controller; the
	// webhooks are served by every replica.
	LeaderElection          bool
	LeaderElectionNamespace string
}

// Scheme is the types the process reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, cryov1.AddToScheme(s)
}

// Run runs the controller and serves the webhooks until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	mgr, err := New(cfg, o)
	if err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("cryo controller: %w", err)
	}
	return nil
}

// New builds the manager with the controller and the webhooks.
func New(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "cryo-controller.cryo.io",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// A replica stopped by SIGTERM (a rollout, a drain) gives the
		// Lease up at once, so the next one takes over without waiting
		// out the lease; Run returns right after, nothing reconciles
		// past it.
		LeaderElectionReleaseOnCancel: true,
		WebhookServer:                 webhook.NewServer(webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir}),
	})
	if err != nil {
		return nil, fmt.Errorf("cryo controller: a manager for the apiserver at %s: %w (check --kubeconfig or the pod's service account)", cfg.Host, err)
	}
	if err := (&Reconciler{Client: mgr.GetClient(), Pods: mgr.GetAPIReader(), Events: mgr.GetEventRecorder("cryo-controller")}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	srv := mgr.GetWebhookServer()
	srv.Register(admission.CheckpointPath, &cradmission.Webhook{Handler: &admission.Checkpoints{Client: mgr.GetClient()}})
	srv.Register(admission.PodPath, &cradmission.Webhook{Handler: &admission.Pods{
		Reader: mgr.GetAPIReader(), Events: &admission.Events{Client: mgr.GetClient()}, RuntimeClass: o.RuntimeClass}})
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhooks", srv.StartedChecker()); err != nil {
		return nil, err
	}
	return mgr, nil
}
