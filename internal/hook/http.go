package hook

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// httpIn makes the hook's request to 127.0.0.1:Port in the network
// namespace of pid: the container's loopback is not the host's.
func httpIn(ctx context.Context, pid int, s Spec) (Answer, error) {
	conn, err := dialIn(ctx, pid, s.Port)
	if err != nil {
		return Answer{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// The transport dials nothing: the connection was made in the
	// container's namespace, and only it is used.
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	url := "http://127.0.0.1:" + strconv.Itoa(s.Port) + s.Target
	var payload io.Reader
	if s.Body != "" {
		payload = strings.NewReader(s.Body)
	}
	req, err := http.NewRequestWithContext(ctx, s.Method, url, payload)
	if err != nil {
		return Answer{}, fmt.Errorf("%w: %v", ErrFailed, err)
	}
	if s.Body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	a := Answer{Status: resp.StatusCode, Text: strings.TrimSpace(string(body[:min(len(body), 512)]))}
	if resp.StatusCode/100 != 2 {
		return a, fmt.Errorf("%w: HTTP status %d", ErrFailed, resp.StatusCode)
	}
	return a, nil
}

// dialIn connects to 127.0.0.1:port from inside pid's network namespace.
// A socket belongs to the namespace of the thread that created it, so the
// dial runs on a thread of its own that joins the namespace and is never
// given back to the runtime: the goroutine ends locked, and Go ends the
// thread with it, so no other goroutine ever runs in the container's
// namespace.
func dialIn(ctx context.Context, pid int, port int) (net.Conn, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("%w: the container's network namespace: %v", ErrFailed, err)
	}
	defer ns.Close()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("%w: join the network namespace of pid %d: %v", ErrFailed, pid, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
