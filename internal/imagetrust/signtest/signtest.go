// Package signtest signs manifest digests as `cosign sign` does (a
// Sigstore bundle of a DSSE in-toto statement), for the tests of signature
// verification.
package signtest

import (
	"encoding/json"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/sign"
)

// CosignPredicate is the statement type of `cosign sign`.
const CosignPredicate = "https://sigstore.dev/cosign/sign/v1"

// Bundle signs with kp a statement of type predicate whose subject is the
// manifest digest d of repository name, and returns the bundle's JSON.
func Bundle(t testing.TB, kp sign.Keypair, name string, d digest.Digest, predicate string) []byte {
	t.Helper()
	stmt, _ := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []map[string]any{{"name": name, "digest": map[string]string{"sha256": d.Encoded()}}},
		"predicateType": predicate,
		"predicate":     map[string]any{},
	})
	pb, err := sign.Bundle(&sign.DSSEData{Data: stmt, PayloadType: "application/vnd.in-toto+json"}, kp, sign.BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&bundle.Bundle{Bundle: pb}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
