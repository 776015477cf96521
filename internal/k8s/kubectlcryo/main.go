// Package kubectlcryo is the kubectl plugin kubectl-cryo (`kubectl cryo`):
// it creates Checkpoints of pods and follows them, lists them, and points
// a workload's pod template at one (the annotation cryo.io/restore-from),
// through the API server with the user's own kubeconfig, as kubectl does.
package kubectlcryo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
)

// BinaryName is the name kubectl finds the plugin by, in PATH.
const BinaryName = "kubectl-cryo"

// env is what every command shares: the kubeconfig's client and
// namespace, and where to print.
type env struct {
	flags  clientcmd.ConfigOverrides
	loader *clientcmd.ClientConfigLoadingRules
	out    io.Writer
	c      client.Client
	ns     string
}

// Main runs `kubectl cryo ARGS`.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := rootCommand(os.Stdout)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

func rootCommand(out io.Writer) *cobra.Command {
	e := &env{out: out, loader: clientcmd.NewDefaultClientConfigLoadingRules()}
	root := &cobra.Command{
		Use: "cryo",
		// kubectl runs the plugin as kubectl-cryo; its user types this.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl cryo"},
		Short:       "checkpoint pods into container images, and start new pods from them",
		Long: `kubectl cryo drives cryo's Checkpoint API (cryo.io/v1alpha1).

A Checkpoint names one container of a running pod and a repository. cryo's
node agent on the pod's node checkpoints the container through the kubelet
(CUDA state included, the pod keeps running), builds a container image of
the checkpoint and pushes it, pinned by digest. A pod whose template
carries the annotation cryo.io/restore-from: CHECKPOINT starts from that
image and carries on where the checkpoint was taken, if its container
matches the checkpointed one; otherwise it starts fresh.

The kubeconfig is found as kubectl finds it: --kubeconfig, $KUBECONFIG,
~/.kube/config; --context and -n as for kubectl.`,
		Example: `  kubectl cryo checkpoint trainer-0 --to registry.example/ckpt/trainer --secret push-creds --wait
  kubectl cryo ls
  kubectl cryo restore-from trainer-0-x7k2p deployment/trainer
  kubectl scale deployment/trainer --replicas=3`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return e.connect()
		},
	}
	fs := root.PersistentFlags()
	fs.StringVar(&e.loader.ExplicitPath, "kubeconfig", "", "path to the kubeconfig `FILE` (default $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&e.flags.CurrentContext, "context", "", "the kubeconfig `CONTEXT` to use")
	fs.StringVarP(&e.flags.Context.Namespace, "namespace", "n", "", "the `NAMESPACE` (default: the context's)")
	root.AddCommand(checkpointCommand(e), listCommand(e), restoreFromCommand(e))
	return root
}

// connect builds the client from the kubeconfig and the flags.
func (e *env) connect() error {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(e.loader, &e.flags)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if e.ns, _, err = cc.Namespace(); err != nil {
		return fmt.Errorf("kubeconfig namespace: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := cryov1.AddToScheme(scheme); err != nil {
		return err
	}
	e.c, err = client.New(cfg, client.Options{Scheme: scheme})
	return err
}
