package k8s

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// k8sPKI names the PEM files of dir.
type k8sPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caCert string
}

// certSpec is one certificate to sign: its subject and, for a server, its
// addresses and names.
type certSpec struct {
	name  string // the files' base name: name.crt, name.key
	cn    string
	orgs  []string
	ips   []net.IP
	dns   []string
	usage x509.ExtKeyUsage
}

// newK8sPKI makes the CA and every certificate the cluster needs.
func newK8sPKI(t testing.TB, dir, node string) *k8sPKI {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := &k8sPKI{dir: dir, caCert: filepath.Join(dir, "ca.crt")}
	p.caKey = newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cryo-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.caCert, "CERTIFICATE", der)
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	for i, s := range []certSpec{
		{name: "apiserver", cn: "kube-apiserver", usage: x509.ExtKeyUsageServerAuth,
			ips: append(loopback, net.ParseIP(k8sServiceIP)), dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}},
		// system:masters: the admin may do anything, through RBAC's
		// built-in binding; so may the API server at the kubelet (logs,
		// exec), through the kubelet's webhook authorization.
		{name: "admin", cn: "cryo-admin", orgs: []string{"system:masters"}, usage: x509.ExtKeyUsageClientAuth},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, usage: x509.ExtKeyUsageClientAuth},
		// The Node authorizer knows a kubelet by this name and group.
		{name: "kubelet-client", cn: "system:node:" + node, orgs: []string{"system:nodes"}, usage: x509.ExtKeyUsageClientAuth},
		{name: "kubelet", cn: node, usage: x509.ExtKeyUsageServerAuth, ips: loopback, dns: []string{node, "localhost"}},
	} {
		p.sign(t, int64(i+2), s)
	}
	writePEM(t, p.path("sa.key"), "EC PRIVATE KEY", ecDER(t, newKey(t)))
	return p
}

func (p *k8sPKI) path(name string) string { return filepath.Join(p.dir, name) }

// cert and key are the files of one signed certificate.
func (p *k8sPKI) cert(name string) string { return p.path(name + ".crt") }
func (p *k8sPKI) key(name string) string  { return p.path(name + ".key") }

func (p *k8sPKI) sign(t testing.TB, serial int64, s certSpec) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{s.usage},
		IPAddresses: s.ips, DNSNames: s.dns}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.cert(s.name), "CERTIFICATE", der)
	writePEM(t, p.key(s.name), "EC PRIVATE KEY", ecDER(t, key))
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ecDER(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
