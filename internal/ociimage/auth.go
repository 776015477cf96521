package ociimage

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/retry"

	"github.com/cryo-gpu/cryo/internal/report"
)

// RemoteOptions configures access to a registry.
type RemoteOptions struct {
	PlainHTTP bool // talk HTTP, not HTTPS (loopback registries are HTTP by default)
	Insecure  bool // HTTPS without certificate verification
	// NoLoopbackHTTP: a loopback registry gets HTTPS too, unless PlainHTTP
	// (a pull on a pod's behalf must not reach the host's own services).
	NoLoopbackHTTP bool
	// AuthFiles are the registry auth files to search, in order (the
	// entry point's config.Config.AuthFiles, after any named by a flag).
	AuthFiles []string
}

// credentialStore chains the existing auth files: the first that knows a
// registry answers for it.
func credentialStore(files []string) (credentials.Store, error) {
	var stores []credentials.Store
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		s, err := credentials.NewStore(f, credentials.StoreOptions{})
		if err != nil {
			return nil, report.WithRemedy(fmt.Errorf("read auth file %s: %w", f, err), "fix or remove it")
		}
		stores = append(stores, s)
	}
	if len(stores) == 0 {
		return nil, nil
	}
	return credentials.NewStoreWithFallbacks(stores[0], stores[1:]...), nil
}

// newRepository opens the repository of ref with retries (oras's retrying
// transport: 5xx, 429 and connection errors, with backoff) and credentials.
func newRepository(ref string, o RemoteOptions) (*remote.Repository, error) {
	if LooksLikePath(ref) {
		// A path that did not exist fell through to here: the registry
		// would be the host "." or "", and its error would hide the typo.
		return nil, &MissingPathError{Path: ref}
	}
	repo, err := remote.NewRepository(ref)
	if err != nil {
		return nil, fmt.Errorf("%q is not an image reference (want host[:port]/name[:tag]): %w", ref, err)
	}
	repo.PlainHTTP = o.PlainHTTP || !o.NoLoopbackHTTP && isLoopback(repo.Reference.Registry)
	base := http.DefaultTransport.(*http.Transport).Clone()
	if o.Insecure {
		base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	client := &auth.Client{Client: &http.Client{Transport: retry.NewTransport(base)}, Cache: auth.NewCache()}
	client.SetUserAgent("cryo")
	store, err := credentialStore(o.AuthFiles)
	if err != nil {
		return nil, err
	}
	if store != nil {
		client.Credential = credentials.Credential(store)
	}
	repo.Client = client
	return repo, nil
}

// isLoopback: a registry on this host is plain HTTP unless told otherwise,
// as docker and podman treat localhost.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
