// Package hook runs a container's own actions around a checkpoint and a
// restore: an HTTP request to one of its ports on its own loopback (an
// inference server's sleep and wake endpoints), or a command run inside
// it, each with a deadline, named by a small strict syntax (Parse) in an
// annotation or a flag.
package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Kind is how a hook acts on the container.
type Kind uint8

const (
	// KindHTTP: a request to 127.0.0.1:Port inside the container's
	// network namespace; any 2xx answer is a success.
	KindHTTP Kind = iota + 1
	// KindExec: a command run inside the container, as its own user; exit
	// status 0 is a success.
	KindExec
)

// DefaultTimeout bounds a hook that names no deadline: an inference
// server's sleep moves its weights to host memory, seconds per ten GB.
const DefaultTimeout = 60 * time.Second

// Spec is one parsed hook.
type Spec struct {
	Kind   Kind
	Method string // http: GET, POST or PUT
	Target string // http: the request's path and query, "/sleep?level=1"
	Port   int    // http: the port on the container's loopback
	Body   string // http: a JSON body (json=…), "" for none
	Argv   []string
	// Timeout is the hook's deadline: past it the request is abandoned,
	// or the command killed, and the hook has failed.
	Timeout time.Duration
	// Text is what the hook was parsed from, for messages.
	Text string
}

// ErrSyntax is a hook text that Parse refuses.
var ErrSyntax = errors.New("hook syntax")

// Syntax is the one-line description of the syntax, for messages and
// flag help.
const Syntax = `"http:METHOD /PATH port=N [json=BODY]" (METHOD GET, POST or PUT) or "exec:PROG ARG…" or "exec:[\"PROG\",\"ARG\",…]"`

// Parse reads a hook: "http:POST /sleep?level=1 port=8000",
// "exec:/usr/bin/curl -sf …" (arguments split at spaces, no quoting) or
// "exec:[\"/bin/sh\",\"-c\",\"…\"]" (a JSON array, for arguments with
// spaces). Anything else, an unknown method, a port out of range or a
// quote in the split form, is an ErrSyntax that says what was expected.
func Parse(text string) (Spec, error) {
	kind, body, ok := strings.Cut(strings.TrimSpace(text), ":")
	s := Spec{Timeout: DefaultTimeout, Text: text}
	var err error
	switch {
	case !ok:
		err = errors.New("no kind: want http: or exec:")
	case kind == "http":
		s.Kind = KindHTTP
		err = s.parseHTTP(body)
	case kind == "exec":
		s.Kind = KindExec
		s.Argv, err = parseArgv(body)
	default:
		err = fmt.Errorf("unknown kind %q: want http: or exec:", kind)
	}
	if err != nil {
		return Spec{}, fmt.Errorf("hook %q: %v: %w; want %s", text, err, ErrSyntax, Syntax)
	}
	return s, nil
}

var methods = map[string]bool{"GET": true, "POST": true, "PUT": true}

// parseHTTP reads "METHOD /PATH port=N", and an optional json=BODY (a
// JSON value without spaces: SGLang's endpoints want "json={}").
func (s *Spec) parseHTTP(body string) error {
	f := strings.Fields(body)
	if len(f) == 4 {
		v, ok := strings.CutPrefix(f[3], "json=")
		if !ok || !json.Valid([]byte(v)) {
			return fmt.Errorf("%q, want json=BODY with BODY a JSON value without spaces", f[3])
		}
		s.Body, f = v, f[:3]
	}
	if len(f) != 3 {
		return fmt.Errorf("%d fields after http:, want 3 or 4 (METHOD /PATH port=N [json=BODY])", len(f))
	}
	if !methods[f[0]] {
		return fmt.Errorf("method %q, want GET, POST or PUT", f[0])
	}
	u, err := url.ParseRequestURI(f[1])
	if err != nil || !strings.HasPrefix(f[1], "/") || strings.HasPrefix(f[1], "//") || u.Host != "" || u.Fragment != "" {
		return fmt.Errorf("path %q, want an absolute path such as /sleep?level=1", f[1])
	}
	v, ok := strings.CutPrefix(f[2], "port=")
	port, err := strconv.Atoi(v)
	if !ok || err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != v {
		return fmt.Errorf("%q, want port=N with N from 1 to 65535", f[2])
	}
	s.Method, s.Target, s.Port = f[0], f[1], port
	return nil
}

// parseArgv reads a command: a JSON array of strings, or words split at
// white space, in which a quote is refused (it would not mean what a
// shell makes of it).
func parseArgv(body string) ([]string, error) {
	body = strings.TrimSpace(body)
	var argv []string
	if strings.HasPrefix(body, "[") {
		if err := json.Unmarshal([]byte(body), &argv); err != nil {
			return nil, fmt.Errorf("command is not a JSON array of strings: %v", err)
		}
	} else {
		if strings.ContainsAny(body, `"'\`) {
			return nil, errors.New(`quotes and backslashes are not parsed in the split form: give the command as a JSON array, exec:["/bin/sh","-c","…"]`)
		}
		argv = strings.Fields(body)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("no command after exec:")
	}
	if !strings.HasPrefix(argv[0], "/") {
		return nil, fmt.Errorf("program %q is not an absolute path: no PATH is searched", argv[0])
	}
	return argv, nil
}

// ParseTimeout reads a hook's deadline, a positive Go duration ("90s").
func ParseTimeout(text string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(text))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("hook deadline %q: %w; want a positive duration such as 30s or 2m", text, ErrSyntax)
	}
	return d, nil
}

// String is the hook as it was given.
func (s Spec) String() string { return s.Text }
