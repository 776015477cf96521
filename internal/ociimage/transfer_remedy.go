package ociimage

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"

	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// registryRemedy is the one remedy of a registry that did not answer as
// asked, picked by what went wrong: a registry that is not there, one that
// speaks another protocol, a certificate, credentials, a reference it does
// not hold. "" when the error says none of these.
func registryRemedy(err error, ref string) string {
	host, _, _ := strings.Cut(ref, "/")
	var resp *errcode.ErrorResponse
	var dns *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return "start the registry at " + host + ", or correct the address in the reference"
	case errors.As(err, &dns):
		return "correct the registry's name " + host + " (it does not resolve)"
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "pass --plain-http: the registry at " + host + " speaks plain HTTP"
	case errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &verify):
		return "trust the CA of the registry's certificate, or pass --tls-verify=false"
	case errors.As(err, &resp) && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden):
		return "log in to " + host + " (podman login " + host + ") or pass --authfile"
	case errors.Is(err, errdef.ErrNotFound) || errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound:
		return "check the reference: the registry at " + host + " has no " + ref
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "the registry at " + host + " did not answer in time: check that it runs and is reachable, then retry"
	}
	return ""
}
