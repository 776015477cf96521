package agent

import (
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
	"strconv"
	"strings"
	"time"
)

// Kubelet calls the checkpoint API of the kubelet of this agent's own
// node. It authenticates with the agent's own ServiceAccount token, which
// the kubelet checks with the API server (TokenReview) and authorizes
// through a SubjectAccessReview for nodes/checkpoint: the RBAC of the
// agent decides, never a client key that opens every kubelet. The
// kubelet's serving certificate is verified against the CA the agent is
// given.
type Kubelet struct {
	Host  string // the node's address as its serving certificate names it
	Port  int
	Token func() (string, error) // read for each call: projected tokens rotate
	HTTP  *http.Client
}

// NewKubelet is a Kubelet whose TLS trusts only the PEM bundle caFile.
func NewKubelet(host string, port int, caFile string, token func() (string, error)) (*Kubelet, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read the kubelet CA %s: %w", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the kubelet CA %s holds no PEM certificate", caFile)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &Kubelet{Host: host, Port: port, Token: token, HTTP: &http.Client{Transport: tr}}, nil
}

// ErrKubelet is the kubelet refusing or failing a checkpoint.
var ErrKubelet = errors.New("the kubelet's checkpoint API failed")

// KubeletError is one answer of the kubelet that is not an archive.
type KubeletError struct {
	Status int
	Body   string
}

func (e *KubeletError) Error() string {
	return fmt.Sprintf("%v: %d %s: %s", ErrKubelet, e.Status, http.StatusText(e.Status), strings.TrimSpace(e.Body))
}

func (e *KubeletError) Unwrap() error { return ErrKubelet }

// Checkpoint asks the kubelet for a checkpoint archive of one container,
// and returns the archive's path on the node. timeout is passed to the
// kubelet (its CRI call's deadline) and bounds the request too.
func (k *Kubelet) Checkpoint(ctx context.Context, ns, pod, container string, timeout time.Duration) (string, error) {
	tok, err := k.Token()
	if err != nil {
		return "", fmt.Errorf("read the agent's ServiceAccount token: %w", err)
	}
	secs := max(int(timeout/time.Second), 1)
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(k.Host, strconv.Itoa(k.Port)),
		Path:     "/checkpoint/" + url.PathEscape(ns) + "/" + url.PathEscape(pod) + "/" + url.PathEscape(container),
		RawQuery: "timeout=" + strconv.Itoa(secs)}
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := k.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrKubelet, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", &KubeletError{Status: resp.StatusCode, Body: string(body)}
	}
	var answer struct{ Items []string }
	if err := json.Unmarshal(body, &answer); err != nil || len(answer.Items) != 1 {
		return "", fmt.Errorf("%w: answer %q, want one archive", ErrKubelet, body)
	}
	return answer.Items[0], nil
}

// kubeletRemedy is the one thing to do about a failed kubelet call. A
// failure of cryo's shim carries its own remedy in the kubelet's answer,
// which the report prefers to this one.
func kubeletRemedy(err error) string {
	var ke *KubeletError
	if !errors.As(err, &ke) {
		return "check that the agent reaches the kubelet at its node's address and that --kubelet-ca signed the kubelet's certificate"
	}
	switch ke.Status {
	case http.StatusNotFound:
		return "the pod or its container is gone: checkpoint a running pod"
	case http.StatusUnauthorized, http.StatusForbidden:
		return "let the agent's ServiceAccount create nodes/checkpoint (the chart's ClusterRole) and turn on the kubelet's webhook authentication and authorization"
	}
	return "check that the pod runs with runtimeClassName cryo on a node that cryo's installer labelled cryo.io/runtime=ready"
}
