package imagetrust

import (
	"crypto"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// SignPredicate is the in-toto predicate type of cosign's image
// signature: an attestation of another type (an SBOM, a provenance) by
// the same signer is not an approval to run the image.
const SignPredicate = "https://sigstore.dev/cosign/sign/v1"

// checker verifies bundles for one rule with sigstore-go.
type checker struct {
	verifier *verify.Verifier
	identity verify.PolicyOption
}

// newChecker loads the rule's key and trusted root. A key alone verifies
// offline with no timestamp (a key has no validity period); a trusted root
// makes a transparency log entry (and, keyless, the certificate's
// identity and its certificate transparency proof where the root has CT
// logs) required.
func newChecker(keyFile, rootFile string, id *Identity) (*checker, error) {
	if keyFile == "" && rootFile == "" {
		return nil, fmt.Errorf("%w: %w", errNoSigner, ErrPolicy)
	}
	var material root.TrustedMaterialCollection
	c := &checker{identity: verify.WithKey()}
	if keyFile == "" {
		if err := c.keyless(id); err != nil {
			return nil, err
		}
	}
	opts := []verify.VerifierOption{verify.WithNoObserverTimestamps()}
	if rootFile != "" {
		tr, err := root.NewTrustedRootFromPath(rootFile)
		if err != nil {
			return nil, fmt.Errorf("trusted root %s: %v: %w", rootFile, err, ErrPolicy)
		}
		material = append(material, tr)
		opts = []verify.VerifierOption{verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1)}
		if keyFile == "" && len(tr.CTLogs()) > 0 {
			opts = append(opts, verify.WithSignedCertificateTimestamps(1))
		}
	}
	if keyFile != "" {
		km, err := keyMaterial(keyFile)
		if err != nil {
			return nil, err
		}
		material = append(material, km)
	}
	v, err := verify.NewVerifier(material, opts...)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrPolicy)
	}
	c.verifier = v
	return c, nil
}

// keyless sets the certificate identity a keyless signature must carry.
func (c *checker) keyless(id *Identity) error {
	if id == nil || (id.Issuer == "" && id.IssuerRegexp == "") || (id.Subject == "" && id.SubjectRegexp == "") {
		return fmt.Errorf("a keyless rule (trusted_root without key) needs \"identity\" with an issuer and a subject (or their _regexp): any certificate of the root would do otherwise: %w", ErrPolicy)
	}
	ci, err := verify.NewShortCertificateIdentity(id.Issuer, id.IssuerRegexp, id.Subject, id.SubjectRegexp)
	if err != nil {
		return fmt.Errorf("identity: %v: %w", err, ErrPolicy)
	}
	c.identity = verify.WithCertificateIdentity(ci)
	return nil
}

// keyMaterial is the public key of file. The key hint a bundle carries is
// ignored: the rule names its one key, and the signature must verify with
// it whatever the bundle claims.
func keyMaterial(file string) (root.TrustedMaterial, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("public key: %w: %w", err, ErrPolicy)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("public key %s: not a PEM public key (cosign.pub): %v: %w", file, err, ErrPolicy)
	}
	sv, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %v: %w", file, err, ErrPolicy)
	}
	key := root.NewExpiringKey(sv, time.Time{}, time.Time{})
	return root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) { return key, nil }), nil
}

// verify checks that b is a valid cosign image signature of d by the
// rule's signer.
func (c *checker) verify(b *bundle.Bundle, d digest.Digest) error {
	sum, err := hex.DecodeString(d.Encoded())
	if err != nil {
		return fmt.Errorf("digest %s: %v", d, err)
	}
	res, err := c.verifier.Verify(b, verify.NewPolicy(verify.WithArtifactDigest(d.Algorithm().String(), sum), c.identity))
	if err != nil {
		return err
	}
	if res.Statement == nil || res.Statement.GetPredicateType() != SignPredicate {
		return fmt.Errorf("it is not an image signature (an in-toto statement of predicate type %s)", SignPredicate)
	}
	return nil
}
