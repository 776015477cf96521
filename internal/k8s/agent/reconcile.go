package agent

import (
	"context"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
)

// Reconciler takes the Checkpoints assigned to this node (Status.Node)
// from Assigned to Succeeded or Failed, fails those a previous run of the
// agent left half done, and cleans up after deleted ones (the cleanup
// finalizer's contract, api/v1alpha1.CleanupFinalizer).
type Reconciler struct {
	Client client.Client
	// Secrets reads the one push Secret a Checkpoint names, straight from
	// the API server: a cached client would list and watch every Secret.
	Secrets    client.Reader
	Events     events.EventRecorder
	Node       string
	Kubelet    *Kubelet
	WorkRoot   string // the agent's work directories, one per Checkpoint
	ArchiveDir string // the kubelet's checkpoints directory, as mounted here

	mu   sync.Mutex
	mine map[types.UID]bool // the Checkpoints this process has taken on
}

// Reconcile acts on one Checkpoint. A Checkpoint runs to its end inside
// one call: controller-runtime never runs two calls for one object, and
// the agent runs one at a time (MaxConcurrentReconciles 1), since the
// node's CRIU dumps and pushes would only compete.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cp := &cryov1.Checkpoint{}
	if err := r.Client.Get(ctx, req.NamespacedName, cp); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if cp.Status.Node != r.Node {
		return ctrl.Result{}, nil
	}
	if !cp.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.cleanup(ctx, cp)
	}
	switch cp.Status.Phase {
	case cryov1.PhaseAssigned:
		if r.takeOn(cp.UID) {
			r.run(ctx, cp)
		}
	case cryov1.PhaseCheckpointing, cryov1.PhasePushing:
		// This process did not start it (or the cache lags behind the
		// end this process already wrote): a killed agent's run, whose
		// kubelet call and push died with it.
		if r.takeOn(cp.UID) {
			r.abandoned(ctx, cp)
		}
	}
	return ctrl.Result{}, nil
}

// takeOn reports whether this process has not yet taken on the
// Checkpoint uid, and takes it on.
func (r *Reconciler) takeOn(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mine == nil {
		r.mine = map[types.UID]bool{}
	}
	if r.mine[uid] {
		return false
	}
	r.mine[uid] = true
	return true
}
