package k8s

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

const (
	agentNamespace = "cryo-system"
	agentAccount   = "cryo-agent" // the chart's name for release "cryo"
)

// k8sAgent is a running agent.
type k8sAgent struct {
	proc *k8sProc
	work string // its work directories
	log  string
}

// agentRuns counts the agents started, so that each has its own log;
// lastAgentLog is the newest one's.
var (
	agentRuns    int
	lastAgentLog string
)

// installCRD applies the chart's CRD and waits until it serves.
func (c *k8sCluster) installCRD() {
	c.t.Helper()
	c.kubectl("apply", "-f", filepath.Join(harness.RepoRoot(), "deploy", "helm", "cryo", "crds"))
	// Polled, not `kubectl wait`: that fails at once on a CRD whose
	// status has no conditions yet, as a busy API server shows it.
	harness.WaitFor(c.t, time.Minute, "the Checkpoint CRD established", func() bool {
		out, err := c.kubectlErr("get", "crd", "checkpoints.cryo.io", "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
		return err == nil && out == "True"
	})
}

// installAgentRBAC applies the chart's agent objects (its ServiceAccount,
// roles and DaemonSet: no DaemonSet controller runs here, so the
// DaemonSet stays without pods) in the release's namespace.
func (c *k8sCluster) installAgentRBAC(helm string) {
	c.t.Helper()
	c.namespace(agentNamespace, nil)
	chart := filepath.Join(harness.RepoRoot(), "deploy", "helm", "cryo")
	rendered := filepath.Join(c.dir, "agent.yaml")
	harness.WriteFile(c.t, rendered, c.helm(helm, "template", "cryo", chart, "-n", agentNamespace, "-s", "templates/agent.yaml"))
	c.kubectl("apply", "-f", rendered)
}

// agentKubeconfig is a kubeconfig with the agent ServiceAccount's token.
func (c *k8sCluster) agentKubeconfig() string {
	c.t.Helper()
	tok := strings.TrimSpace(c.kubectl("create", "token", agentAccount, "-n", agentNamespace, "--duration=1h"))
	cfg := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "agent",
		"clusters": []any{map[string]any{"name": "cryo", "cluster": map[string]any{"server": c.apiURL, "certificate-authority": c.pki.caCert}}},
		"users":    []any{map[string]any{"name": "agent", "user": map[string]any{"token": tok}}},
		"contexts": []any{map[string]any{"name": "agent", "context": map[string]any{"cluster": "cryo", "user": "agent"}}},
	}
	path := filepath.Join(c.dir, "agent.kubeconfig")
	harness.WriteFile(c.t, path, string(harness.MustJSON(c.t, cfg)))
	return path
}

// startAgent runs bin (a cryo-k8s) as the node agent, with env added, until
// the end of test life (a subtest's agent may outlive the subtest).
func (c *k8sCluster) startAgent(life testing.TB, bin string, env ...string) *k8sAgent {
	c.t.Helper()
	a := &k8sAgent{work: filepath.Join(c.dir, "agent-work")}
	argv := append([]string{"env"}, env...)
	argv = append(argv, bin, "agent", "--node", k8sNodeName, "--kubeconfig", c.agentKubeconfig(),
		"--kubelet-host", "127.0.0.1", "--kubelet-port", strconv.Itoa(c.kubeletPort), "--kubelet-ca", c.pki.caCert,
		"--work-dir", a.work, "--archive-dir", c.archiveDir())
	agentRuns++
	a.log = filepath.Join(c.dir, "agent-"+strconv.Itoa(agentRuns)+".log")
	a.proc = startK8sProc(life, c.dir, "agent-"+strconv.Itoa(agentRuns), argv...)
	lastAgentLog = a.log
	return a
}

// kill SIGKILLs the agent's process group and waits until it is reaped.
func (a *k8sAgent) Kill(t testing.TB) {
	t.Helper()
	_ = syscall.Kill(-a.proc.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-a.proc.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not die of SIGKILL")
	}
}

func (c *k8sCluster) archiveDir() string { return filepath.Join(c.dir, "kubelet", "checkpoints") }

// archives lists the kubelet's checkpoint archives of a pod.
func (c *k8sCluster) archives(ns, pod string) []string {
	m, _ := filepath.Glob(filepath.Join(c.archiveDir(), "checkpoint-"+pod+"_"+ns+"-*.tar"))
	return m
}

// startCryoController runs cryo's controller and webhooks (`cryo-k8s
// controller`, as TestK8sCheckpointAPI runs them) beside the kubelet:
// it assigns each Checkpoint to its pod's node, and its pod webhook
// starts pods of cryo.io/restore-from from the checkpoint image.
func (c *k8sCluster) startCryoController() *apiCluster {
	c.t.Helper()
	c.pki.sign(c.t, 100, certSpec{name: "webhook", cn: "cryo-webhook", usage: x509.ExtKeyUsageServerAuth,
		ips: []net.IP{net.ParseIP("127.0.0.1")}, dns: []string{"localhost"}})
	a := &apiCluster{k8sCluster: c, webhookPort: testsupport.FreePort(c.t), probeAddr: testsupport.FreeAddr(c.t)}
	a.certs()
	a.webhooks()
	a.chartRBAC() // the controller runs with the chart's rights, as TestK8sCheckpointAPI's
	a.startController()
	return a
}

// checkpointObj reads a Checkpoint.
func (c *k8sCluster) checkpointObj(ns, name string) *cryov1.Checkpoint {
	c.t.Helper()
	cp := &cryov1.Checkpoint{}
	if err := c.getJSON("/apis/cryo.io/v1alpha1/namespaces/"+ns+"/checkpoints/"+name, cp); err != nil {
		c.t.Fatalf("get checkpoint %s/%s: %v", ns, name, err)
	}
	return cp
}

// waitCheckpoint polls the Checkpoint until it ends, and returns it with
// every phase and progress it was seen in.
func (c *k8sCluster) waitCheckpoint(ns, name string) (*cryov1.Checkpoint, []string) {
	c.t.Helper()
	var seen []string
	deadline := time.Now().Add(k8sWait)
	for {
		cp := c.checkpointObj(ns, name)
		s := string(cp.Status.Phase) + " " + strconv.Itoa(int(cp.Status.Progress)) + "%"
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if cp.Status.Phase.Done() {
			return cp, seen
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("checkpoint %s/%s did not end (seen %v)\n%s", ns, name, seen, c.agentTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *k8sCluster) agentTail() string {
	data, _ := os.ReadFile(lastAgentLog)
	lines := strings.Split(string(data), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// plugin is kubectl-cryo run as the admin; it returns its output.
func (c *k8sCluster) plugin(args ...string) string {
	c.t.Helper()
	out, err := harness.RunErr(2*time.Minute, nil, harness.CryoBin(c.t, "kubectl-cryo"), append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	if err != nil {
		c.t.Fatalf("kubectl cryo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// startPlugin starts kubectl-cryo in the background (for --wait), and
// returns a function that waits for its end and gives its output.
func (c *k8sCluster) startPlugin(args ...string) func() (string, error) {
	c.t.Helper()
	cmd := exec.Command(harness.CryoBin(c.t, "kubectl-cryo"), append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c.t.Cleanup(func() { _ = cmd.Process.Kill(); <-done; done <- nil })
	return func() (string, error) {
		select {
		case err := <-done:
			done <- err
			return buf.String(), err
		case <-time.After(k8sWait):
			return buf.String(), os.ErrDeadlineExceeded
		}
	}
}

// pluginList is `kubectl cryo ls --json`.
func (c *k8sCluster) pluginList(ns string) []cryov1.Checkpoint {
	c.t.Helper()
	var l []cryov1.Checkpoint
	if err := json.Unmarshal([]byte(c.plugin("ls", "-n", ns, "--json")), &l); err != nil {
		c.t.Fatalf("kubectl cryo ls --json: %v", err)
	}
	return l
}
