package ociimage

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// An encrypted image of the store has its details read with its key
// (decrypted as they stream); without one, the note names the flag.
func TestInspectLocalEncrypted(t *testing.T) {
	pub, priv := rsaPEM(t)
	ctx := context.Background()
	st := newStore(t)
	src, err := OpenSource(tinyCheckpoint(t, t.TempDir(), "ckpt"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, _, err := Build(ctx, st, src, BuildOptions{Ref: "example/tiny:enc", SplitAt: 16 << 10, Encrypt: &EncryptOptions{PublicKeys: [][]byte{pub}}}); err != nil {
		t.Fatal(err)
	}
	sum, err := st.InspectLocalWith(ctx, "example/tiny:enc", InspectOptions{})
	if err != nil || sum.Details != nil || !strings.Contains(sum.DetailsNote, "--decryption-key") {
		t.Fatalf("without a key: %v, details %v, note %q", err, sum.Details != nil, sum.DetailsNote)
	}
	sum, err = st.InspectLocalWith(ctx, "example/tiny:enc", InspectOptions{Decrypt: &DecryptOptions{PrivateKeys: [][]byte{priv}}})
	if err != nil {
		t.Fatal(err)
	}
	checkTinyDetails(t, sum, false)
}

// rsaPEM is a fresh RSA key pair, PEM-encoded, as cryo's encryption flags
// take them.
func rsaPEM(t *testing.T) (pub, priv []byte) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}
