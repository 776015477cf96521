package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
)

// abandoned ends a Checkpoint that a previous run of this node's agent
// left in Checkpointing or Pushing: its kubelet call and its push died
// with that process, and nothing of it may be trusted. The workload was
// never touched by the agent (the kubelet's checkpoint leaves the pod
// running, or cryo's shim rolled it back), so it only removes what that
// run left on the node and says why.
func (r *Reconciler) abandoned(ctx context.Context, cp *cryov1.Checkpoint) {
	r.removeLeftovers(ctx, cp, workDir(r.WorkRoot, string(cp.UID)))
	s := &statusWriter{c: r.Client, key: client.ObjectKeyFromObject(cp), timings: cp.Status.StepTimings}
	f := cryov1.Failure{Step: string(cp.Status.Phase),
		Cause:  "AgentRestarted: the node agent stopped while the Checkpoint was " + string(cp.Status.Phase) + "; what it had done is removed",
		Remedy: "create the Checkpoint again"}
	r.Events.Eventf(cp, nil, corev1.EventTypeWarning, "AgentRestarted", "Checkpoint", "%s", f.Cause)
	if err := s.fail(ctx, f); err != nil {
		log.FromContext(ctx).Error(err, "record the failure", "checkpoint", s.key)
	}
}

// removeLeftovers removes the Checkpoint's work directory and any archive
// the kubelet wrote for it since the agent began.
func (r *Reconciler) removeLeftovers(ctx context.Context, cp *cryov1.Checkpoint, w work) {
	if err := w.remove(); err != nil {
		log.FromContext(ctx).Error(err, "remove the work directory", "dir", w.dir)
	}
	for _, a := range r.archivesOf(cp) {
		if err := os.Remove(a); err != nil && !os.IsNotExist(err) {
			log.FromContext(ctx).Error(err, "remove the kubelet's archive", "archive", a)
		}
	}
}

// archivesOf lists the kubelet's archives of the Checkpoint's container
// written since the Checkpoint was created. The kubelet names them
// checkpoint-<pod>_<namespace>-<container>-<RFC 3339 time>.tar; the
// time test keeps an administrator's older archives of the same
// container.
func (r *Reconciler) archivesOf(cp *cryov1.Checkpoint) []string {
	if r.ArchiveDir == "" {
		return nil
	}
	prefix := "checkpoint-" + cp.Spec.PodName + "_" + cp.Namespace + "-" + cp.Spec.Container + "-"
	matches, _ := filepath.Glob(filepath.Join(r.ArchiveDir, prefix+"*.tar"))
	since := cp.CreationTimestamp.Add(-time.Second)
	var out []string
	for _, m := range matches {
		// Names hold dashes: what follows the prefix must be the time
		// alone, or the archive is another container's (namespace "ns-a"
		// and container "b" against namespace "ns" and container "a-b").
		stamp := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), prefix), ".tar")
		if _, err := time.Parse(time.RFC3339, stamp); err != nil {
			continue
		}
		if fi, err := os.Stat(m); err == nil && !fi.ModTime().Before(since) {
			out = append(out, m)
		}
	}
	return out
}

// cleanup is the agent's side of the cleanup finalizer: the kubelet's
// archive and the pushed tag go, then the finalizer. A registry that
// refuses deletes leaves the image; a Warning Event says so, and the
// finalizer goes all the same, as the contract asks.
func (r *Reconciler) cleanup(ctx context.Context, cp *cryov1.Checkpoint) error {
	if !controllerutil.ContainsFinalizer(cp, cryov1.CleanupFinalizer) {
		return nil
	}
	r.removeLeftovers(ctx, cp, workDir(r.WorkRoot, string(cp.UID)))
	if cp.Status.Image != "" {
		if err := r.deleteImage(ctx, cp); err != nil {
			r.Events.Eventf(cp, nil, corev1.EventTypeWarning, "ImageLeft", "Cleanup",
				"the image %s was left in its registry: %v", cp.Status.Image, err)
		}
	}
	patch := client.MergeFrom(cp.DeepCopy())
	controllerutil.RemoveFinalizer(cp, cryov1.CleanupFinalizer)
	return client.IgnoreNotFound(r.Client.Patch(ctx, cp, patch))
}

// deleteImage deletes the pushed manifest with the push Secret.
func (r *Reconciler) deleteImage(ctx context.Context, cp *cryov1.Checkpoint) error {
	w := workDir(r.WorkRoot, string(cp.UID)+"-cleanup")
	if err := w.create(); err != nil {
		return err
	}
	defer w.remove()
	if err := r.readSecret(ctx, cp, w); err != nil {
		return err
	}
	return w.deleteRemote(ctx, cp.Status.Image)
}
