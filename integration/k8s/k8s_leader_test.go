package k8s

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	nsLeader = "leader"
	// leaseName is the controller's LeaderElectionID.
	leaseName = "cryo-controller.cryo.io"
	// leaseTime is controller-runtime's default lease duration (15 s)
	// plus its retry period (2 s), with room for a loaded host.
	leaseTime = 25 * time.Second
)

func TestK8sLeaderElection(t *testing.T) {
	began := time.Now()
	a := startAPICluster(t)
	a.stopController()
	// The webhook would need a server that this test kills: without it,
	// Checkpoints keep the requester annotation the test sets.
	a.kubectl("delete", "mutatingwebhookconfiguration", "cryo")
	a.namespace(nsLeader, nil)

	first := a.startElecting("first")
	holder := a.waitHolder(t, "", time.Minute)
	second := a.startElecting("second")
	a.createFailing(t, "one")
	a.checkpointIn(t, nsLeader, "one", cryov1.PhaseFailed)
	if !reconciled(first, "one") || reconciled(second, "one") {
		t.Fatalf("the Checkpoint one was not reconciled by the holder alone: first %v, second %v\n%s\n%s",
			reconciled(first, "one"), reconciled(second, "one"), first.tail(20), second.tail(20))
	}
	if h := a.holder(); h != holder {
		t.Fatalf("the Lease moved from %s to %s with both running", holder, h)
	}

	// Killed: nobody releases the Lease, the second waits it out.
	killed := time.Now()
	_ = syscall.Kill(-first.cmd.Process.Pid, syscall.SIGKILL)
	<-first.done
	holder = a.waitHolder(t, holder, leaseTime)
	t.Logf("the second took the Lease %s after the first's SIGKILL", time.Since(killed).Round(time.Millisecond))
	a.createFailing(t, "two")
	a.checkpointIn(t, nsLeader, "two", cryov1.PhaseFailed)
	if !reconciled(second, "two") {
		t.Fatalf("the new holder did not reconcile the Checkpoint two\n%s", second.tail(20))
	}

	// Stopped: the holder gives the Lease up as it exits.
	third := a.startElecting("third")
	stopped := time.Now()
	second.Stop()
	a.waitHolder(t, holder, 10*time.Second)
	t.Logf("the third took the Lease %s after the second's SIGTERM", time.Since(stopped).Round(time.Millisecond))
	a.createFailing(t, "three")
	a.checkpointIn(t, nsLeader, "three", cryov1.PhaseFailed)
	if !reconciled(third, "three") {
		t.Fatalf("the third did not reconcile the Checkpoint three\n%s", third.tail(20))
	}
	t.Logf("took %s", time.Since(began).Round(time.Millisecond))
}

// startElecting runs one more `cryo-k8s controller --leader-elect` with
// the chart's rights, and waits until its webhooks serve: every replica
// serves them, leader or not.
func (a *apiCluster) startElecting(name string) *k8sProc {
	a.t.Helper()
	probe := testsupport.FreeAddr(a.t)
	p := startK8sProc(a.t, a.dir, "cryo-controller-"+name, harness.CryoBin(a.t, "cryo-k8s"), "controller",
		"--kubeconfig", a.ctrlKubeconfig, "--webhook-host", "127.0.0.1", "--webhook-port", strconv.Itoa(testsupport.FreePort(a.t)),
		"--cert-dir", a.certDir, "--probe-addr", probe, "--leader-elect", "--leader-election-namespace", helmNamespace)
	p.waitUp(a.t, time.Minute, func() error {
		_, err := httpGet(a.plain(), "http://"+probe+"/readyz")
		return err
	})
	return p
}

// holder is the Lease's holder now; "" when there is none.
func (a *apiCluster) holder() string {
	out, err := a.kubectlErr("get", "lease", leaseName, "-n", helmNamespace, "-o", "jsonpath={.spec.holderIdentity}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// waitHolder waits until the Lease has a holder other than old.
func (a *apiCluster) waitHolder(t *testing.T, old string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if h := a.holder(); h != "" && h != old {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("no holder of the Lease but %q within %s", old, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createFailing creates a Checkpoint of a pod that does not exist, as
// the webhook would have annotated it: whoever reconciles it fails it
// PodMissing and logs that.
func (a *apiCluster) createFailing(t *testing.T, name string) {
	t.Helper()
	cp := &cryov1.Checkpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsLeader, Name: name, Annotations: map[string]string{cryov1.RequesterAnnotation: "admin"}},
		Spec:       cryov1.CheckpointSpec{PodName: "nosuch", Container: "app", Repository: "registry.example/app"},
	}
	if err := a.admin.Create(context.Background(), cp); err != nil {
		t.Fatalf("create the Checkpoint %s: %v", name, err)
	}
}

// reconciled reports whether the controller's log says it failed the
// Checkpoint name.
func reconciled(p *k8sProc, name string) bool {
	data, _ := os.ReadFile(p.log)
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "checkpoint failed") && strings.Contains(line, "checkpoint "+nsLeader+"/"+name+" ") {
			return true
		}
	}
	return false
}
