package k8s

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/k8s/controller"
	"github.com/cryo-gpu/cryo/internal/k8s/controller/admission"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

// apiCluster is the API-only cluster with cryo's controller.
type apiCluster struct {
	*k8sCluster
	cfg         *rest.Config
	admin       client.Client
	certDir     string
	webhookPort int
	probeAddr   string
	ctrl        *k8sProc
	// ctrlKubeconfig is the controller's: the chart's service account.
	ctrlKubeconfig string
}

// startAPICluster starts etcd, the API server and cryo's controller, and
// installs the CRD, the webhook configuration and the chart's RBAC.
func startAPICluster(t *testing.T) *apiCluster {
	t.Helper()
	c := &k8sCluster{t: t, bin: requireK8s(t)}
	before := hostState(t)
	t.Cleanup(func() { c.checkGone(before) })
	c.dir = t.TempDir()
	c.pki = newK8sPKI(t, filepath.Join(c.dir, "pki"), k8sNodeName)
	c.pki.sign(t, 100, certSpec{name: "webhook", cn: "cryo-webhook", usage: x509.ExtKeyUsageServerAuth,
		ips: []net.IP{net.ParseIP("127.0.0.1")}, dns: []string{"localhost"}})
	c.adminHTTP = c.tlsClient("admin")
	c.startEtcd()
	c.startAPIServer()
	c.kubeconfig = c.writeKubeconfig("admin.kubeconfig", "admin")
	a := &apiCluster{k8sCluster: c, webhookPort: testsupport.FreePort(t), probeAddr: testsupport.FreeAddr(t)}
	a.certs()
	var err error
	if a.cfg, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	a.admin = a.client(rest.ImpersonationConfig{})
	c.kubectl("apply", "-f", filepath.Join(harness.RepoRoot(), "deploy", "helm", "cryo", "crds"))
	// Not kubectl wait: it fails at once on a CRD that has no conditions yet.
	eventually(t, "the CRD established", func() (bool, error) {
		out, err := c.kubectlErr("get", "crd", "checkpoints.cryo.io", "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
		return err == nil && strings.TrimSpace(out) == "True", err
	})
	a.webhooks()
	a.chartRBAC()
	a.startController()
	return a
}

// chartRBAC creates the controller's service account and rights, and
// the policy that keeps the requester, from the Helm chart (helm
// template), and a kubeconfig that impersonates that
// service account: the controller runs with exactly the chart's RBAC.
func (a *apiCluster) chartRBAC() {
	a.t.Helper()
	helm := requireHelm(a.t)
	out, err := harness.RunErr(time.Minute, nil, helm, "template", helmRelease, filepath.Join(harness.RepoRoot(), "deploy", "helm", "cryo"),
		"-n", helmNamespace, "--show-only", "templates/controller-rbac.yaml", "--show-only", "templates/checkpoint-policy.yaml")
	if err != nil {
		a.t.Fatalf("helm template: %v\n%s", err, out)
	}
	a.kubectl("create", "namespace", helmNamespace)
	rbac := filepath.Join(a.dir, "controller-rbac.yaml")
	harness.WriteFile(a.t, rbac, out)
	a.kubectl("apply", "-f", rbac)
	cfg := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "cryo",
		"clusters": []any{map[string]any{"name": "cryo", "cluster": map[string]any{"server": a.apiURL, "certificate-authority": a.pki.caCert}}},
		"users": []any{map[string]any{"name": "controller", "user": map[string]any{"client-certificate": a.pki.cert("admin"), "client-key": a.pki.key("admin"),
			"as": "system:serviceaccount:" + helmNamespace + ":" + helmRelease + "-controller"}}},
		"contexts": []any{map[string]any{"name": "cryo", "context": map[string]any{"cluster": "cryo", "user": "controller"}}},
	}
	a.ctrlKubeconfig = filepath.Join(a.dir, "controller.kubeconfig")
	harness.WriteFile(a.t, a.ctrlKubeconfig, string(harness.MustJSON(a.t, cfg)))
}

// certs puts the webhook's certificate where the controller reads it.
func (a *apiCluster) certs() {
	a.certDir = filepath.Join(a.dir, "webhook-certs")
	mkdirAll(a.t, a.certDir)
	for from, to := range map[string]string{a.pki.cert("webhook"): "tls.crt", a.pki.key("webhook"): "tls.key"} {
		b, err := os.ReadFile(from)
		if err != nil {
			a.t.Fatal(err)
		}
		harness.WriteFile(a.t, filepath.Join(a.certDir, to), string(b))
	}
}

// client is a client as the admin, or as the user imp impersonates.
func (a *apiCluster) client(imp rest.ImpersonationConfig) client.Client {
	a.t.Helper()
	crlog.SetLogger(logr.Discard())
	scheme, err := controller.Scheme()
	if err != nil {
		a.t.Fatal(err)
	}
	cfg := rest.CopyConfig(a.cfg)
	cfg.Impersonate = imp
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		a.t.Fatal(err)
	}
	return cl
}

// as is a client that impersonates user in groups.
func (a *apiCluster) as(user string, groups ...string) client.Client {
	return a.client(rest.ImpersonationConfig{UserName: user, Groups: groups})
}

// webhooks configures the API server to call the controller's webhooks
// by URL, with the rules and failure policies the chart gives them.
func (a *apiCluster) webhooks() {
	a.t.Helper()
	ca, err := os.ReadFile(a.pki.caCert)
	if err != nil {
		a.t.Fatal(err)
	}
	url := func(path string) map[string]any {
		return map[string]any{"url": "https://127.0.0.1:" + strconv.Itoa(a.webhookPort) + path, "caBundle": base64.StdEncoding.EncodeToString(ca)}
	}
	hook := func(name, path, policy, group, resource string) map[string]any {
		return map[string]any{"name": name, "clientConfig": url(path), "failurePolicy": policy, "sideEffects": "NoneOnDryRun",
			"admissionReviewVersions": []string{"v1"}, "timeoutSeconds": 5, "reinvocationPolicy": "Never",
			"rules": []any{map[string]any{"operations": []string{"CREATE"}, "apiGroups": []string{group}, "apiVersions": []string{"v1", "v1alpha1"}, "resources": []string{resource}, "scope": "Namespaced"}}}
	}
	cfg := map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
		"metadata": map[string]any{"name": "cryo"},
		"webhooks": []any{
			hook("checkpoints.cryo.io", admission.CheckpointPath, "Fail", cryov1.GroupVersion.Group, "checkpoints"),
			hook("pods.cryo.io", admission.PodPath, "Ignore", "", "pods"),
		}}
	if out, err := a.apply(cfg); err != nil {
		a.t.Fatalf("webhook configuration: %v\n%s", err, out)
	}
}

// startController runs `cryo-k8s controller` and waits until its
// webhooks serve.
func (a *apiCluster) startController() {
	a.t.Helper()
	a.ctrl = startK8sProc(a.t, a.dir, "cryo-controller", harness.CryoBin(a.t, "cryo-k8s"), "controller",
		"--kubeconfig", a.ctrlKubeconfig, "--webhook-host", "127.0.0.1", "--webhook-port", strconv.Itoa(a.webhookPort),
		"--cert-dir", a.certDir, "--probe-addr", a.probeAddr)
	a.ctrl.waitUp(a.t, time.Minute, func() error {
		_, err := httpGet(a.plain(), "http://"+a.probeAddr+"/readyz")
		return err
	})
}

// stopController stops it: its webhooks are down from then on.
func (a *apiCluster) stopController() { a.ctrl.Stop() }

// eventually polls cond every 200 ms until it holds or 30 s pass.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		var ok bool
		if ok, err = cond(); ok {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within 30 s (last error: %v)", what, err)
}

// checkpointIn waits until the Checkpoint reaches phase and returns it.
func (a *apiCluster) checkpointIn(t *testing.T, ns, name string, phase cryov1.Phase) *cryov1.Checkpoint {
	t.Helper()
	var cp cryov1.Checkpoint
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := a.admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cp)
		if err == nil && cp.Status.Phase == phase {
			return &cp
		}
		if time.Now().After(deadline) {
			t.Fatalf("Checkpoint %s/%s not in phase %s within 30 s: %v, status %+v\n%s", ns, name, phase, err, cp.Status, a.ctrl.tail(30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
