package kubectlcryo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/progress"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/internal/report"
)

type checkpointFlags struct {
	container, to, secret, name string
	wait, leaveRunning          bool
	timeout                     time.Duration
}

func checkpointCommand(e *env) *cobra.Command {
	var f checkpointFlags
	cmd := &cobra.Command{
		Use:   "checkpoint POD --to REPOSITORY [-c CONTAINER] [--secret SECRET] [--wait]",
		Short: "checkpoint a container of a running pod into an image in REPOSITORY",
		Long: `Creates a Checkpoint of one container of POD (by default its only or
default container). cryo's agent on the pod's node checkpoints it through
the kubelet, builds the image and pushes it to REPOSITORY (no tag: the
Checkpoint's name is the tag, and the status pins the digest) with the
docker-registry Secret --secret of the same namespace. The pod keeps
running, unless --leave-running=false: then cryo's controller deletes
it once the image is pushed (never after a failure), so that its owner
can start it again, e.g. from the checkpoint.

With --wait, follows the Checkpoint's phase and progress until it ends,
and exits non-zero if it failed, printing the failed step, its cause and
the remedy. Without it, prints the Checkpoint's name; follow it with
"kubectl get checkpoint NAME -w".`,
		Example: `  kubectl create secret docker-registry push-creds --docker-server=registry.example \
    --docker-username=U --docker-password=P
  kubectl cryo checkpoint trainer-0 --to registry.example/ckpt/trainer --secret push-creds --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return e.checkpoint(cmd.Context(), args[0], f) },
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.container, "container", "c", "", "the `CONTAINER` to checkpoint (default: the pod's default container)")
	fs.StringVar(&f.to, "to", "", "the `REPOSITORY` to push the image to, without a tag (required)")
	fs.StringVar(&f.secret, "secret", "", "the docker-registry `SECRET` of the namespace that may push to the repository")
	fs.StringVar(&f.name, "name", "", "the Checkpoint's `NAME` (default: POD- and a random suffix)")
	fs.BoolVarP(&f.wait, "wait", "w", false, "follow the Checkpoint until it succeeds or fails")
	fs.BoolVar(&f.leaveRunning, "leave-running", true, "keep the pod running; false deletes it once the image is pushed")
	fs.DurationVar(&f.timeout, "timeout", 0, "the Checkpoint's `DURATION` limit (default: the API's, 10m)")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func (e *env) checkpoint(ctx context.Context, pod string, f checkpointFlags) error {
	ctr, err := e.containerOf(ctx, pod, f.container)
	if err != nil {
		return err
	}
	cp := &cryov1.Checkpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: f.name},
		Spec:       cryov1.CheckpointSpec{PodName: pod, Container: ctr, Repository: f.to, PushSecretName: f.secret},
	}
	if f.name == "" {
		cp.GenerateName = pod + "-"
	}
	if !f.leaveRunning {
		cp.Spec.LeaveRunning = &f.leaveRunning
	}
	if f.timeout > 0 {
		cp.Spec.Timeout = &metav1.Duration{Duration: f.timeout}
	}
	if err := e.c.Create(ctx, cp); err != nil {
		return fmt.Errorf("create the Checkpoint of %s/%s: %w", e.ns, pod, err)
	}
	fmt.Fprintf(e.out, "checkpoint.cryo.io/%s created (pod %s, container %s)\n", cp.Name, pod, ctr)
	if !f.wait {
		return nil
	}
	return e.follow(ctx, client.ObjectKeyFromObject(cp))
}

// containerOf is the container to checkpoint: the one named, else the
// pod's default (kubectl's annotation), else its only container.
func (e *env) containerOf(ctx context.Context, pod, named string) (string, error) {
	if named != "" {
		return named, nil
	}
	p := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: pod}, p); err != nil {
		return "", fmt.Errorf("pod %s/%s: %w", e.ns, pod, err)
	}
	if d := p.Annotations["kubectl.kubernetes.io/default-container"]; d != "" {
		return d, nil
	}
	if len(p.Spec.Containers) != 1 {
		return "", fmt.Errorf("pod %s/%s has %d containers: name one with -c", e.ns, pod, len(p.Spec.Containers))
	}
	return p.Spec.Containers[0].Name, nil
}

// ErrCheckpointFailed is a followed Checkpoint that ended Failed.
var ErrCheckpointFailed = errors.New("the checkpoint failed")

// follow prints the Checkpoint's phase and progress as they change,
// until it ends.
func (e *env) follow(ctx context.Context, key client.ObjectKey) error {
	last := ""
	for {
		cp := &cryov1.Checkpoint{}
		if err := e.c.Get(ctx, key, cp); err != nil {
			return fmt.Errorf("follow the Checkpoint %s: %w", key, err)
		}
		st := cp.Status
		if line := progressLine(cp); line != last {
			fmt.Fprintln(e.out, line)
			last = line
		}
		switch st.Phase {
		case cryov1.PhaseSucceeded:
			fmt.Fprintf(e.out, "image %s (%s)\n", st.Image, progress.Human(st.ImageSize))
			for _, t := range st.StepTimings {
				fmt.Fprintf(e.out, "  %-20s %s\n", t.Step, t.Duration.Duration)
			}
			return nil
		case cryov1.PhaseFailed:
			return failedError(key, st.Failure)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func progressLine(cp *cryov1.Checkpoint) string {
	phase := cp.Status.Phase
	if phase == "" {
		phase = cryov1.PhasePending
	}
	line := fmt.Sprintf("%s: %s %d%%", cp.Name, phase, cp.Status.Progress)
	if cp.Status.Node != "" {
		line += " on " + cp.Status.Node
	}
	if st := cp.Status; st.BytesTotal > 0 && !phase.Done() {
		line += fmt.Sprintf(", %s of %s", progress.Human(st.BytesDone), progress.Human(st.BytesTotal))
	}
	return line
}

func failedError(key client.ObjectKey, f *cryov1.Failure) error {
	if f == nil {
		return fmt.Errorf("%w: %s", ErrCheckpointFailed, key)
	}
	msg := fmt.Errorf("%w: %s at step %s: %s", ErrCheckpointFailed, key, f.Step, f.Cause)
	if f.Remedy != "" {
		return report.WithRemedy(msg, f.Remedy)
	}
	return msg
}
