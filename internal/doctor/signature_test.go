package doctor

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/imagetrust"
)

// The signature line: no policy warns that pulls are unverified, a valid
// one lists its rules, an unusable one fails (every pull it governs is
// refused).
func TestSignaturePolicy(t *testing.T) {
	f := newFixture(t)
	if _, err := os.Stat(imagetrust.DefaultPolicy); err != nil {
		f.opts.Config.Environ = []string{"PATH=/usr/bin"}
		want(t, f.env().checkSignaturePolicy(), Warn, "no signature policy", "are not verified", "Verifying signatures")
	}
	dir := filepath.Dir(f.write("etc/cryo/cosign.pub", publicKeyPEM(t)))
	good := f.write("etc/cryo/policy.json", `{"rules": [{"repository": "reg.example/ckpt", "key": "cosign.pub"}, {"repository": "reg.example/scratch", "accept_unsigned": true}]}`)
	f.opts.Config.Environ = []string{imagetrust.EnvPolicy + "=" + good}
	want(t, f.env().checkSignaturePolicy(), OK, good, "reg.example/ckpt → signed by "+filepath.Join(dir, "cosign.pub"), "reg.example/scratch → unsigned accepted", "other repositories are refused")
	broken := f.write("etc/cryo/broken.json", `{"rules": [{"repository": "reg.example/ckpt", "kye": "cosign.pub"}]}`)
	f.opts.Config.Environ = []string{imagetrust.EnvPolicy + "=" + broken}
	want(t, f.env().checkSignaturePolicy(), Fail, `unknown field "kye"`, "every pull it governs is refused", "unset "+imagetrust.EnvPolicy)
}

// publicKeyPEM is a fresh ECDSA P-256 public key, as cosign.pub holds one.
func publicKeyPEM(t *testing.T) string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}
