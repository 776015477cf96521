package installer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The node installer speaks to the API server over plain HTTPS with the
// pod's service account, as client-go's in-cluster configuration does:
// four calls do not justify doubling the one binary that every node runs
// as its shim (client-go and its API types took it from 33 to 67 MB).

const (
	// LabelRuntime is the node label the RuntimeClass cryo selects on.
	LabelRuntime = "cryo.io/runtime"
	// eventNamespace holds the events about nodes, as the kubelet's.
	eventNamespace = "default"
	// saDir is where a pod's service account token is mounted.
	saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// Node is the node this pod runs on, through the API with the pod's
// service account.
type Node struct {
	Name   string
	base   string // https://host:port
	token  string // the token file, read again for each call (it rotates)
	client *http.Client
}

// APIError is an answer of the API server other than success.
type APIError struct {
	Status int
	Body   string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("API server: %d %s: %s", e.Status, http.StatusText(e.Status), strings.TrimSpace(e.Body))
}

// status is the HTTP status of an API error in err's chain, or 0.
func status(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// InCluster connects to the API server as the pod's service account
// ($KUBERNETES_SERVICE_HOST and _PORT, the token and CA of saDir).
func InCluster(name string) (*Node, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	remedy := "run the installer in a pod with its service account token"
	if host == "" || port == "" {
		return nil, stepErr("label", name, errors.New("KUBERNETES_SERVICE_HOST or _PORT unset: not in a pod"), remedy)
	}
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, stepErr("label", name, err, remedy)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, stepErr("label", name, errors.New("no certificate in "+filepath.Join(saDir, "ca.crt")), remedy)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &Node{Name: name, base: "https://" + net.JoinHostPort(host, port), token: filepath.Join(saDir, "token"),
		client: &http.Client{Transport: tr}}, nil
}

// call makes one request; out, if not nil, receives the JSON answer.
func (n *Node) call(ctx context.Context, method, path, ctype string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := n.do(ctx, method, path, ctype, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// do sends a request and returns a successful response, whose body the
// caller closes.
func (n *Node) do(ctx context.Context, method, path, ctype string, body any) (*http.Response, error) {
	tok, err := os.ReadFile(n.token)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Accept", "application/json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, &APIError{Status: resp.StatusCode, Body: string(b)}
	}
	return resp, nil
}

// Label sets (or, for "", removes) cryo.io/runtime on the node.
func (n *Node) Label(ctx context.Context, value string) error {
	var v any = value
	if value == "" {
		v = nil
	}
	patch := map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelRuntime: v}}}
	err := n.call(ctx, http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(n.Name), "application/merge-patch+json", patch, nil)
	if err != nil {
		return stepErr("label", n.Name, err, "grant the installer's service account patch on nodes (the chart's ClusterRole)")
	}
	return nil
}

// Event records an event about the node: reason and message, Warning if
// warn.
func (n *Node) Event(ctx context.Context, warn bool, reason, message string) error {
	var node struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	if err := n.call(ctx, http.MethodGet, "/api/v1/nodes/"+url.PathEscape(n.Name), "", nil, &node); err != nil {
		return stepErr("label", n.Name, err, "grant the installer's service account get on nodes")
	}
	typ := "Normal"
	if warn {
		typ = "Warning"
	}
	now := time.Now().UTC().Format(time.RFC3339)
	ev := map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata":       map[string]any{"generateName": n.Name + ".cryo-", "namespace": eventNamespace},
		"involvedObject": map[string]any{"apiVersion": "v1", "kind": "Node", "name": n.Name, "uid": node.Metadata.UID},
		"reason":         reason, "message": message, "type": typ,
		"source":         map[string]any{"component": "cryo-node-install", "host": n.Name},
		"firstTimestamp": now, "lastTimestamp": now, "count": 1,
	}
	if err := n.call(ctx, http.MethodPost, "/api/v1/namespaces/"+eventNamespace+"/events", "application/json", ev, nil); err != nil {
		return stepErr("label", n.Name, err, "grant the installer's service account create on events")
	}
	return nil
}

func dsPath(ns string) string {
	return "/apis/apps/v1/namespaces/" + url.PathEscape(ns) + "/daemonsets"
}

// dsMeta is the part of a DaemonSet the installer reads.
type dsMeta struct {
	Metadata struct {
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
}

// DaemonSetLive reports whether the DaemonSet ns/name exists and is not
// being deleted: a pod of it that stops is then replaced (a rollout, a
// restart), and the node keeps cryo; a DaemonSet gone (`helm uninstall`)
// means the node gives cryo back.
func (n *Node) DaemonSetLive(ctx context.Context, ns, name string) (bool, error) {
	var ds dsMeta
	err := n.call(ctx, http.MethodGet, dsPath(ns)+"/"+url.PathEscape(name), "", nil, &ds)
	if status(err) == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, stepErr("api", fmt.Sprintf("daemonset %s/%s", ns, name), err,
			"grant the installer's service account get on daemonsets in its namespace")
	}
	return ds.Metadata.DeletionTimestamp == nil, nil
}

// WatchGone calls gone once when the DaemonSet ns/name is deleted or
// marked for deletion, until ctx ends. helm uninstall deletes the
// DaemonSet before the service account and roles of the release: an
// installer that learns it from a watch already open can still act
// through the API (remove its node's label) in that moment.
func (n *Node) WatchGone(ctx context.Context, ns, name string) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		for ctx.Err() == nil {
			if n.watchOnce(ctx, ns, name) {
				close(gone)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}()
	return gone
}

// watchOnce follows one watch stream; it reports whether the DaemonSet
// went.
func (n *Node) watchOnce(ctx context.Context, ns, name string) bool {
	q := url.Values{"watch": {"true"}, "fieldSelector": {"metadata.name=" + name}}
	resp, err := n.do(ctx, http.MethodGet, dsPath(ns)+"?"+q.Encode(), "", nil)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev struct {
			Type   string `json:"type"`
			Object dsMeta `json:"object"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.Type == "DELETED" || (ev.Type == "MODIFIED" && ev.Object.Metadata.DeletionTimestamp != nil) {
			return true
		}
	}
	return false
}
