package kubectlcryo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
)

func restoreFromCommand(e *env) *cobra.Command {
	var unset bool
	cmd := &cobra.Command{
		Use:   "restore-from CHECKPOINT deployment/NAME|statefulset/NAME|job/NAME",
		Short: "start a workload's new pods from a checkpoint",
		Long: `Sets the annotation cryo.io/restore-from: CHECKPOINT on the pod template of
a Deployment, StatefulSet or Job of the namespace. Every pod created from
the template after that (a rollout, a scale-up, a replaced pod) starts from
the checkpoint's image, if its container matches the checkpointed one
(cryo's admission webhook compares their compatibility keys); otherwise it
starts fresh and an Event on the pod says why. Changing the template rolls
a Deployment or StatefulSet: its existing pods are replaced by restored
ones. A Job's template cannot change once the Job exists: create the Job
with the annotation instead (the command says so).

--unset removes the annotation: new pods start fresh again.`,
		Example: `  kubectl cryo restore-from trainer-0-x7k2p deployment/trainer
  kubectl scale deployment/trainer --replicas=3
  kubectl cryo restore-from --unset - deployment/trainer`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.restoreFrom(cmd.Context(), args[0], args[1], unset)
		},
	}
	cmd.Flags().BoolVar(&unset, "unset", false, "remove the annotation (CHECKPOINT is ignored; give -)")
	return cmd
}

// workloads are the kinds whose pod template restore-from annotates.
var workloads = map[string]func() client.Object{
	"deployment":  func() client.Object { return &appsv1.Deployment{} },
	"statefulset": func() client.Object { return &appsv1.StatefulSet{} },
	"job":         func() client.Object { return &batchv1.Job{} },
}

func (e *env) restoreFrom(ctx context.Context, checkpoint, target string, unset bool) error {
	kind, name, ok := strings.Cut(target, "/")
	newObj, known := workloads[strings.TrimSuffix(strings.ToLower(kind), "s")]
	if !ok || !known || name == "" {
		return fmt.Errorf("%q: want deployment/NAME, statefulset/NAME or job/NAME", target)
	}
	if !unset {
		if err := e.checkCheckpoint(ctx, checkpoint); err != nil {
			return err
		}
	}
	var value any = checkpoint
	if unset {
		value = nil
	}
	patch := map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{cryov1.RestoreFromAnnotation: value}}}}}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	obj := newObj()
	obj.SetNamespace(e.ns)
	obj.SetName(name)
	if err := e.c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, data)); err != nil {
		if kind == "job" && apierrors.IsInvalid(err) {
			return fmt.Errorf("%s: a Job's pod template is immutable: create the Job with the annotation %s: %s in spec.template.metadata.annotations (%w)",
				target, cryov1.RestoreFromAnnotation, checkpoint, err)
		}
		return fmt.Errorf("annotate %s: %w", target, err)
	}
	if unset {
		fmt.Fprintf(e.out, "%s: new pods start fresh\n", target)
	} else {
		fmt.Fprintf(e.out, "%s: new pods restore from %s\n", target, checkpoint)
	}
	return nil
}

// checkCheckpoint refuses a Checkpoint that does not exist, and warns of
// one that has not succeeded: the webhook would start the pods fresh.
func (e *env) checkCheckpoint(ctx context.Context, name string) error {
	cp := &cryov1.Checkpoint{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, cp); err != nil {
		return fmt.Errorf("Checkpoint %s/%s: %w", e.ns, name, err)
	}
	if cp.Status.Phase != cryov1.PhaseSucceeded {
		fmt.Fprintf(e.out, "warning: Checkpoint %s is %s, not Succeeded: until it succeeds, new pods start fresh\n", name, orDash(string(cp.Status.Phase)))
	}
	return nil
}
