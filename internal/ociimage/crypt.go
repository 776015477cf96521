package ociimage

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/containers/ocicrypt"
	encconfig "github.com/containers/ocicrypt/config"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/report"
)

// EncryptOptions encrypts layers for the holders of these public keys
// (JWE, as containerd's imgcrypt and Podman use), PEM or DER.
type EncryptOptions struct {
	PublicKeys [][]byte
}

// DecryptOptions holds the private keys that may decrypt layers.
type DecryptOptions struct {
	PrivateKeys [][]byte
}

// encryptedSuffix marks an encrypted layer's media type (ocicrypt).
const encryptedSuffix = "+encrypted"

// LoadKeys reads key files; a "jwe:" prefix (imgcrypt's syntax) is accepted.
func LoadKeys(specs []string) ([][]byte, error) {
	var keys [][]byte
	for _, s := range specs {
		path := strings.TrimPrefix(s, "jwe:")
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read key %s: %w", path, err)
		}
		keys = append(keys, data)
	}
	return keys, nil
}

// encryptLayer encrypts the plain layer read from in (described by plain)
// into the store with a fresh symmetric key wrapped for every recipient.
func (st *Store) encryptLayer(in io.Reader, plain ocispec.Descriptor, o *EncryptOptions) (ocispec.Descriptor, error) {
	cc, err := encconfig.EncryptWithJwe(o.PublicKeys)
	if err != nil {
		return plain, report.WithRemedy(fmt.Errorf("encryption keys: %w", err), "give --encryption-key a PEM public key (openssl rsa -pubout)")
	}
	enc, finalize, err := ocicrypt.EncryptLayer(cc.EncryptConfig, in, plain)
	if err != nil {
		return plain, fmt.Errorf("encrypt layer: %w", err)
	}
	out, err := createEncTemp(st.blobDir())
	if err != nil {
		return plain, err
	}
	defer os.Remove(out.Name())
	dc := newDigestCounter()
	_, err = io.Copy(multi(out, dc), enc)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return plain, fmt.Errorf("encrypt layer: %w", err)
	}
	ann, err := finalize()
	if err != nil {
		return plain, fmt.Errorf("encrypt layer: %w", err)
	}
	for k, v := range plain.Annotations {
		ann[k] = v
	}
	d := ocispec.Descriptor{MediaType: plain.MediaType + encryptedSuffix, Digest: dc.Digest(), Size: dc.n, Annotations: ann}
	return d, os.Rename(out.Name(), st.blobPath(d))
}

// decryptLayer wraps r, the encrypted blob of d, with its decryption.
// ocicrypt's cipher authenticates the stream: a modified ciphertext fails
// at its end.
func decryptLayer(r io.Reader, d ocispec.Descriptor, o *DecryptOptions) (io.Reader, error) {
	if o == nil || len(o.PrivateKeys) == 0 {
		return nil, report.WithRemedy(fmt.Errorf("layer %s is encrypted and no key was given: %w", d.Digest.Encoded()[:12], ErrDecrypt), "pass --decryption-key with the private key of a recipient")
	}
	cc, err := encconfig.DecryptWithPrivKeys(o.PrivateKeys, make([][]byte, len(o.PrivateKeys)))
	if err != nil {
		return nil, report.WithRemedy(fmt.Errorf("decryption keys: %v: %w", err, ErrDecrypt), "give --decryption-key an unencrypted PEM private key")
	}
	plain, _, err := ocicrypt.DecryptLayer(cc.DecryptConfig, r, d, false)
	if err != nil {
		return nil, report.WithRemedy(fmt.Errorf("layer %s: none of the given keys can decrypt it (%s): %w", d.Digest.Encoded()[:12], firstLine(err.Error()), ErrDecrypt), "use the private key matching an --encryption-key of the build")
	}
	return plain, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
