package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/report"
)

// The steps of the agent's part of a checkpoint, as Failure.Step and
// StepTimings name them.
const (
	stepTag     = "tag"
	stepSecret  = "secret"
	stepKubelet = "kubelet-checkpoint"
	stepBuild   = "build"
	stepPush    = "push"
	stepCleanup = "cleanup"
)

// run checkpoints the Checkpoint's container through the kubelet, builds
// the runnable image, pushes it and records the outcome. Whatever
// happens, the work directory and the kubelet's archive are gone after.
func (r *Reconciler) run(ctx context.Context, cp *cryov1.Checkpoint) {
	s := &statusWriter{c: r.Client, key: client.ObjectKeyFromObject(cp)}
	w := workDir(r.WorkRoot, string(cp.UID))
	err := s.update(ctx, func(st *cryov1.CheckpointStatus) {
		now := metav1.Now()
		st.Phase, st.Progress, st.StartTime = cryov1.PhaseCheckpointing, 5, &now
	})
	if err == nil {
		err = r.sequence(ctx, cp, s, w)
	}
	r.removeLeftovers(ctx, cp, w)
	if err != nil {
		log.FromContext(ctx).Info("checkpoint failed", "checkpoint", s.key, "error", err.Error())
		r.Events.Eventf(cp, nil, corev1.EventTypeWarning, "CheckpointFailed", "Checkpoint", "%s", err.Error())
		if ferr := s.fail(ctx, failureOf(err)); ferr != nil {
			log.FromContext(ctx).Error(ferr, "record the failure", "checkpoint", s.key)
		}
	}
}

// sequence is the work of run, step by step.
func (r *Reconciler) sequence(ctx context.Context, cp *cryov1.Checkpoint, s *statusWriter, w work) error {
	id := cp.Namespace + "/" + cp.Spec.PodName + "/" + cp.Spec.Container
	// The webhook refused such a Checkpoint; one created while it was not
	// configured fails here, before the kubelet stops anything.
	if err := cryov1.ValidateImageRef(cp); err != nil {
		return stepErr(id, stepTag, err, "create the Checkpoint again with a name of at most 128 characters and a repository without tag")
	}
	if err := w.create(); err != nil {
		return stepErr(id, stepBuild, err, "check that the agent's work directory "+r.WorkRoot+" is writable")
	}
	if err := s.timed(stepSecret, func() error { return r.readSecret(ctx, cp, w) }); err != nil {
		return stepErr(id, stepSecret, err, "create the Secret "+cp.Spec.PushSecretName+" (type kubernetes.io/dockerconfigjson) in namespace "+cp.Namespace)
	}
	var archive string
	failpoint(stepKubelet)
	err := s.timed(stepKubelet, func() (err error) {
		archive, err = r.Kubelet.Checkpoint(ctx, cp.Namespace, cp.Spec.PodName, cp.Spec.Container, timeoutOf(cp))
		return err
	})
	if err != nil {
		return stepErr(id, stepKubelet, err, kubeletRemedy(err))
	}
	defer removeArchive(archive)
	if err := s.progress(ctx, buildSpan.phase, buildSpan.lo); err != nil {
		return err
	}
	// The image library draws its byte counts here; follow copies them
	// into the status.
	bytes := progress.New(io.Discard, false)
	var b *built
	err = s.timed(stepBuild, func() (err error) {
		defer s.follow(ctx, bytes, buildSpan)()
		b, err = w.buildRunnable(ctx, archive, cryov1.ImageRef(cp), bytes)
		return err
	})
	if err != nil {
		return stepErr(id, stepBuild, err, "check the agent's log and free space in "+r.WorkRoot)
	}
	s.insertAfter(stepKubelet, b.steps)
	if err := s.progress(ctx, pushSpan.phase, pushSpan.lo); err != nil {
		return err
	}
	failpoint(stepPush)
	var digest string
	err = s.timed(stepPush, func() (err error) {
		defer s.follow(ctx, bytes, pushSpan)()
		digest, err = w.push(ctx, b, bytes)
		return err
	})
	if err != nil {
		return stepErr(id, stepPush, err, "check that the Secret "+cp.Spec.PushSecretName+" may push to "+cp.Spec.Repository)
	}
	return s.succeed(ctx, pinned(cp.Spec.Repository, digest), b.summary)
}

// readSecret writes the push Secret's docker config into the work
// directory; a Checkpoint without one pushes anonymously.
func (r *Reconciler) readSecret(ctx context.Context, cp *cryov1.Checkpoint, w work) error {
	if cp.Spec.PushSecretName == "" {
		return nil
	}
	sec := &corev1.Secret{}
	if err := r.Secrets.Get(ctx, client.ObjectKey{Namespace: cp.Namespace, Name: cp.Spec.PushSecretName}, sec); err != nil {
		return err
	}
	data, ok := sec.Data[corev1.DockerConfigJsonKey]
	if !ok {
		return fmt.Errorf("%w: Secret %s/%s has no %s", ErrSecret, cp.Namespace, sec.Name, corev1.DockerConfigJsonKey)
	}
	return w.writeAuth(data)
}

// ErrSecret is a push Secret the agent cannot use.
var ErrSecret = errors.New("unusable push Secret")

// timeoutOf is the kubelet call's deadline: the Checkpoint's timeout, or
// the API's default.
func timeoutOf(cp *cryov1.Checkpoint) time.Duration {
	if cp.Spec.Timeout != nil && cp.Spec.Timeout.Duration > 0 {
		return cp.Spec.Timeout.Duration
	}
	return 10 * time.Minute
}

func stepErr(id, step string, err error, remedy string) error {
	return &report.StepError{Op: "checkpoint", ID: id, Step: step, Err: err, Remedy: remedy}
}

func removeArchive(path string) {
	if path != "" {
		_ = os.Remove(path)
	}
}
