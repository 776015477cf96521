package ociimage

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/report"
)

// A registry that is down, one that wants credentials, and one without the
// reference each get the one remedy that fits, not a list of four.
func TestRegistryRemedy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	status := http.StatusUnauthorized
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
	}))
	t.Cleanup(srv.Close)
	up := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		ref    string
		status int
		want   string
	}{
		{down + "/ckpt/app:v1", 0, "start the registry at " + down + ", or correct the address in the reference"},
		{up + "/ckpt/app:v1", http.StatusUnauthorized, "log in to " + up + " (podman login " + up + ") or pass --authfile"},
		{up + "/ckpt/app:v1", http.StatusNotFound, "check the reference: the registry at " + up + " has no " + up + "/ckpt/app:v1"},
	} {
		status = c.status
		_, _, err := remoteManifest(context.Background(), c.ref, RemoteOptions{})
		var se *report.StepError
		if !errors.As(err, &se) || se.Remedy != c.want {
			t.Errorf("%s (status %d): %v, want the remedy %q", c.ref, c.status, err, c.want)
		}
	}
}
