package k8s

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

const (
	k8sVersion = "v1.37.2"
	// k8sNodeName is the node's name and its address: the kubelet refuses
	// a loopback --node-ip, but takes a name that is an IP as the node's
	// InternalIP, where the API server reaches the kubelet (logs, exec).
	k8sNodeName     = "127.0.0.1"
	k8sServiceRange = "10.0.0.0/24"
	k8sServiceIP    = "10.0.0.1" // the "kubernetes" service's address, in the API server's certificate
	k8sWait         = 2 * time.Minute
)

// k8sCluster is the running cluster.
type k8sCluster struct {
	t           *testing.T
	dir         string // everything of the cluster's: PKI, etcd, kubelet root, logs
	bin         string // kubelet, kube-apiserver, kubectl
	node        *harness.CRINode
	pki         *k8sPKI
	etcdURL     string
	apiURL      string
	kubeconfig  string // the admin's
	kubeletPort int
	apiserver   *k8sProc
	kubelet     *k8sProc
	adminHTTP   *http.Client
	app         string // the app's image, in a registry, pulled on the node
}

// k8sBinDir is where build-k8s.sh puts the binaries: $CRYO_K8S_DIR or
// /var/cache/cryo-k8s/<version>.
func k8sBinDir() string {
	if d := os.Getenv("CRYO_K8S_DIR"); d != "" {
		return d
	}
	return filepath.Join("/var/cache/cryo-k8s", k8sVersion)
}

// requireK8s returns the binaries' directory. It skips the test only where
// build-k8s.sh recorded that Kubernetes cannot be built on this machine;
// binaries that were simply never built fail it, with the remedy.
func requireK8s(t testing.TB) string {
	t.Helper()
	dir := k8sBinDir()
	for _, b := range []string{"kubelet", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err == nil {
			continue
		}
		if why, err := os.ReadFile(filepath.Join(dir, "build.failed")); err == nil {
			t.Skipf("no kubelet: Kubernetes %s cannot be built on this machine (contrib/kubernetes/build-k8s.sh failed; it needs Go and the Go module proxy):\n%s", k8sVersion, why)
		}
		t.Fatalf("%s missing in %s: run `make deps` or contrib/kubernetes/build-k8s.sh (CRYO_K8S_DIR names another directory)", b, dir)
	}
	return dir
}

// etcdBin is the etcd that install-deps.sh unpacks.
func (c *k8sCluster) etcdBin() string {
	p := filepath.Join(harness.DepsDir(), "etcd", "usr", "bin", "etcd")
	if _, err := os.Stat(p); err != nil {
		c.t.Fatalf("etcd missing (%v): run `make deps`", err)
	}
	return p
}

// startK8sCluster starts the CRI node, etcd, the API server and the
// kubelet, waits for the node to be Ready, and creates the RuntimeClass
// cryo from contrib/kubernetes/runtimeclass.yaml. Cleanup stops them in
// the reverse order and then checks that nothing of them is left.
func startK8sCluster(t *testing.T) *k8sCluster {
	t.Helper()
	c := startK8sClusterOn(t, harness.StartCRINode)
	c.kubectl("apply", "-f", filepath.Join(harness.RepoRoot(), "contrib", "kubernetes", "runtimeclass.yaml"))
	return c
}

// startK8sClusterOn is startK8sCluster on the CRI node that node starts,
// without the RuntimeClass.
func startK8sClusterOn(t *testing.T, node func(testing.TB) *harness.CRINode) *k8sCluster {
	t.Helper()
	harness.RequireRoot(t)
	c := &k8sCluster{t: t, bin: requireK8s(t)}
	before := hostState(t)
	t.Cleanup(func() { c.checkGone(before) }) // registered first: runs last
	// The directory goes after the CRI node's pods (their logs are in it).
	c.dir = t.TempDir()
	c.node = node(t)
	c.pki = newK8sPKI(t, filepath.Join(c.dir, "pki"), k8sNodeName)
	c.adminHTTP = c.tlsClient("admin")
	c.startEtcd()
	c.startAPIServer()
	c.kubeconfig = c.writeKubeconfig("admin.kubeconfig", "admin")
	c.startKubelet()
	return c
}

// with is the cluster seen from a subtest.
func (c *k8sCluster) With(t *testing.T) *k8sCluster {
	d := *c
	d.t = t
	d.node = c.node.With(t)
	return &d
}

// writeKubeconfig writes a kubeconfig for the client certificate cert.
func (c *k8sCluster) writeKubeconfig(name, cert string) string {
	c.t.Helper()
	cfg := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "cryo",
		"clusters": []any{map[string]any{"name": "cryo", "cluster": map[string]any{"server": c.apiURL, "certificate-authority": c.pki.caCert}}},
		"users":    []any{map[string]any{"name": cert, "user": map[string]any{"client-certificate": c.pki.cert(cert), "client-key": c.pki.key(cert)}}},
		"contexts": []any{map[string]any{"name": "cryo", "context": map[string]any{"cluster": "cryo", "user": cert}}},
	}
	path := filepath.Join(c.dir, name)
	harness.WriteFile(c.t, path, string(harness.MustJSON(c.t, cfg)))
	return path
}

// kubectl runs kubectl as the admin and returns its output.
func (c *k8sCluster) kubectl(args ...string) string {
	c.t.Helper()
	out, err := c.kubectlErr(args...)
	if err != nil {
		c.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectlErr is kubectl for a command that may fail.
func (c *k8sCluster) kubectlErr(args ...string) (string, error) {
	return harness.RunErr(time.Minute, nil, filepath.Join(c.bin, "kubectl"), append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
}

// apply creates or updates the objects of obj (a map, encoded as JSON).
func (c *k8sCluster) apply(obj any) (string, error) {
	c.t.Helper()
	f, err := os.CreateTemp(c.dir, "obj-*.json")
	if err != nil {
		c.t.Fatal(err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(harness.MustJSON(c.t, obj))
	f.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	return c.kubectlErr("apply", "-f", f.Name())
}

// namespace creates namespace ns with labels, and its service account
// "default" (the controller manager's job, which this cluster lacks),
// without API credentials mounted into pods.
func (c *k8sCluster) namespace(ns string, labels map[string]string) {
	c.t.Helper()
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{
		map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns, "labels": labels}},
		map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default", "namespace": ns},
			"automountServiceAccountToken": false},
	}}
	if out, err := c.apply(list); err != nil {
		c.t.Fatalf("create namespace %s: %v\n%s", ns, err, out)
	}
}

// tlsClient is an HTTPS client that trusts the cluster's CA and shows the
// client certificate cert ("" for none).
func (c *k8sCluster) tlsClient(cert string) *http.Client {
	c.t.Helper()
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(c.pki.caCert)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		c.t.Fatalf("CA %s: %v", c.pki.caCert, err)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(c.pki.cert(cert), c.pki.key(cert))
		if err != nil {
			c.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func (c *k8sCluster) admin() *http.Client { return c.adminHTTP }
func (c *k8sCluster) plain() *http.Client { return &http.Client{Timeout: 10 * time.Second} }

// httpGet returns the body of a GET that answers 200.
func httpGet(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), err
}

// getJSON decodes an API object, as the admin.
func (c *k8sCluster) getJSON(path string, v any) error {
	body, err := httpGet(c.admin(), c.apiURL+path)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(body), v)
}
