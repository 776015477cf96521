package k8s

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// k8sProc is one daemon of the test cluster.
type k8sProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process has exited and been reaped
}

// startK8sProc starts argv in a new process group, its output in
// dir/name.log. Pdeathsig: a test binary killed by its timeout takes the
// daemon with it.
func startK8sProc(t testing.TB, dir, name string, argv ...string) *k8sProc {
	t.Helper()
	p := &k8sProc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(p.Stop)
	return p
}

// stop ends the daemon as its service manager would (SIGTERM, then
// SIGKILL after a grace period), then kills what is left of its group.
func (p *k8sProc) Stop() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // children that outlived the leader
}

// exited reports whether the daemon has ended.
func (p *k8sProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail is the end of the daemon's log, for a failure.
func (p *k8sProc) tail(n int) string {
	data, _ := os.ReadFile(p.log)
	return fmt.Sprintf("--- %s log (%s) ---\n%s", p.name, p.log, harness.LastLines(string(data), n))
}

// waitUp polls ready until it holds, failing the test with the daemon's
// log when the daemon exits or the deadline passes.
func (p *k8sProc) waitUp(t testing.TB, timeout time.Duration, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	err := errors.New("not polled")
	for time.Now().Before(deadline) {
		if p.exited() {
			t.Fatalf("%s exited: %v\n%s", p.name, p.cmd.ProcessState, p.tail(40))
		}
		if err = ready(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s not ready after %s: %v\n%s", p.name, timeout, err, p.tail(40))
}

// startEtcd runs etcd on two free loopback ports with its data in dir;
// fsync is off, since the data dies with the test.
func (c *k8sCluster) startEtcd() {
	c.t.Helper()
	client, peer := "http://"+testsupport.FreeAddr(c.t), "http://"+testsupport.FreeAddr(c.t)
	p := startK8sProc(c.t, c.dir, "etcd", c.etcdBin(), "--name", "cryo", "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "cryo="+peer,
		"--unsafe-no-fsync", "--log-level", "warn")
	p.waitUp(c.t, 30*time.Second, func() error {
		out, err := httpGet(c.plain(), client+"/health")
		if err == nil && !strings.Contains(out, `"health":"true"`) {
			err = fmt.Errorf("health: %s", out)
		}
		return err
	})
	c.etcdURL = client
}

// startAPIServer runs kube-apiserver on a free loopback port with the
// Node and RBAC authorizers (the kubelet reaches only its own pods'
// secrets), privileged pods allowed (the PodSecurity admission, on by
// default, decides per namespace), and no controller manager: the test
// creates the service accounts its namespaces need.
func (c *k8sCluster) startAPIServer() {
	c.t.Helper()
	addr := testsupport.FreeAddr(c.t)
	port := addr[strings.LastIndex(addr, ":")+1:]
	pki := c.pki
	p := startK8sProc(c.t, c.dir, "kube-apiserver", filepath.Join(c.bin, "kube-apiserver"),
		"--etcd-servers="+c.etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+port,
		"--tls-cert-file="+pki.cert("apiserver"), "--tls-private-key-file="+pki.key("apiserver"), "--client-ca-file="+pki.caCert,
		"--kubelet-client-certificate="+pki.cert("apiserver-kubelet-client"), "--kubelet-client-key="+pki.key("apiserver-kubelet-client"),
		"--kubelet-certificate-authority="+pki.caCert, "--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+pki.path("sa.key"),
		"--service-account-signing-key-file="+pki.path("sa.key"), "--service-cluster-ip-range="+k8sServiceRange,
		"--authorization-mode=Node,RBAC", "--allow-privileged=true", "--cert-dir="+filepath.Join(c.dir, "apiserver"),
		"--endpoint-reconciler-type=none", "--profiling=false",
		// Webhooks of a Service are reached at its endpoints, not its
		// cluster address: there is no kube-proxy to route that.
		"--enable-aggregator-routing=true")
	c.apiURL = "https://" + addr
	p.waitUp(c.t, 2*time.Minute, func() error {
		out, err := httpGet(c.admin(), c.apiURL+"/readyz")
		if err == nil && strings.TrimSpace(out) != "ok" {
			err = fmt.Errorf("readyz: %s", out)
		}
		return err
	})
	c.apiserver = p
}
