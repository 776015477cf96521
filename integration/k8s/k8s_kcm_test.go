package k8s

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// k8sControllers are the controllers the workload tests need: a
// Deployment's rollout and scale, its ReplicaSets' pods, the garbage
// collector that removes a ReplicaSet's pods with it, and the node
// lifecycle controller, which lifts the node.kubernetes.io/not-ready
// taint the kubelet registers its node with once the node is Ready:
// without it the scheduler binds no pod.
var k8sControllers = []string{"deployment-controller", "replicaset-controller", "garbage-collector-controller",
	"node-lifecycle-controller"}

// requireK8sControllers is requireK8s for the controller manager and the
// scheduler too, which build-k8s.sh builds with the others.
func requireK8sControllers(t testing.TB) {
	t.Helper()
	dir := requireK8s(t)
	for _, b := range []string{"kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%s missing in %s: run `make deps` or contrib/kubernetes/build-k8s.sh (CRYO_K8S_DIR names another directory)", b, dir)
		}
	}
}

// startWorkloadControllers starts kube-controller-manager and
// kube-scheduler against the cluster's API server and waits until both
// answer /healthz. Cleanup stops them before the kubelet (cleanups run
// in reverse), so that no controller replaces a pod the node removes.
// It returns both, for their logs.
func (c *k8sCluster) startWorkloadControllers() (kcm, scheduler *k8sProc) {
	c.t.Helper()
	requireK8sControllers(c.t)
	kcm = c.startComponent("kube-controller-manager", "system:kube-controller-manager", 120,
		"--controllers="+strings.Join(k8sControllers, ","), "--use-service-account-credentials=true")
	return kcm, c.startComponent("kube-scheduler", "system:kube-scheduler", 121)
}

// startComponent runs one control-plane component bin as user, on a free
// loopback port, with args added.
func (c *k8sCluster) startComponent(bin, user string, serial int64, args ...string) *k8sProc {
	c.t.Helper()
	c.pki.sign(c.t, serial, certSpec{name: bin + "-client", cn: user, usage: x509.ExtKeyUsageClientAuth})
	c.pki.sign(c.t, serial+100, certSpec{name: bin, cn: bin, usage: x509.ExtKeyUsageServerAuth,
		ips: []net.IP{net.ParseIP("127.0.0.1")}, dns: []string{"localhost"}})
	kubeconfig := c.writeKubeconfig(bin+".kubeconfig", bin+"-client")
	addr := testsupport.FreeAddr(c.t)
	port := addr[strings.LastIndex(addr, ":")+1:]
	// No delegated authentication of its own endpoints (kubeadm's
	// --authentication-kubeconfig): the API server has no front proxy
	// CA, whose absence the components would log every few seconds
	// over the lines a failure needs; /healthz, all the test reads, is
	// open to anonymous clients (--authorization-always-allow-paths).
	argv := append([]string{filepath.Join(c.bin, bin), "--kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + port,
		"--tls-cert-file=" + c.pki.cert(bin), "--tls-private-key-file=" + c.pki.key(bin),
		"--leader-elect=false", "--profiling=false", "--v=2"}, args...)
	p := startK8sProc(c.t, c.dir, bin, argv...)
	client := c.tlsClient("")
	p.waitUp(c.t, time.Minute, func() error {
		out, err := httpGet(client, "https://"+addr+"/healthz")
		if err == nil && strings.TrimSpace(out) != "ok" {
			err = fmt.Errorf("healthz: %s", out)
		}
		return err
	})
	return p
}
