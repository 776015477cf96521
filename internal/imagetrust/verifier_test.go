package imagetrust

import (
	"context"
	"errors"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/report"
)

const testRef = "registry.test/ckpt/app:v1"

func keyPolicyFor(t *testing.T, pub string) *Policy {
	t.Helper()
	p, err := Parse([]byte(`{"rules": [{"repository": "registry.test/ckpt", "key": "`+pub+`"}]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	p.Source = "policy.json"
	return p
}

// TestCheckKeyed: a digest signed by the rule's key passes and is
// recorded; unsigned, signed by another key, an attestation of another
// kind, and a valid signature of another digest attached to this one are
// refused with a StepError naming the digest, the rule and a remedy.
func TestCheckKeyed(t *testing.T) {
	ctx := context.Background()
	good, other := newSigner(t), newSigner(t)
	p := keyPolicyFor(t, good.pub)
	reg := newFakeRegistry()
	signed := reg.image("signed")
	reg.attach(signed, good.bundle(t, signed.Digest, SignPredicate))

	var logged []string
	v := &Verifier{Log: func(f string, a ...any) { logged = append(logged, f) }}
	if err := v.check(ctx, p, testRef, signed, reg); err != nil {
		t.Fatalf("signed image refused: %v", err)
	}
	if len(logged) != 1 || !strings.HasPrefix(logged[0], "verified") {
		t.Errorf("the verified digest was not recorded: %q", logged)
	}

	unsigned, byOther, moved, attested := reg.image("unsigned"), reg.image("other"), reg.image("moved"), reg.image("attested")
	reg.attach(byOther, other.bundle(t, byOther.Digest, SignPredicate))
	reg.attach(moved, good.bundle(t, signed.Digest, SignPredicate)) // copied from another digest
	reg.attach(attested, good.bundle(t, attested.Digest, "https://slsa.dev/provenance/v1"))
	for _, c := range []struct {
		name string
		img  ocispec.Descriptor
		want error
		text string
	}{
		{"unsigned", unsigned, ErrUnsigned, "carries no signature"},
		{"another key", byOther, ErrBadSignature, "none of the 1 signatures"},
		{"another digest's signature", moved, ErrBadSignature, "none of the 1 signatures"},
		{"an attestation", attested, ErrBadSignature, "not an image signature"},
	} {
		err := v.check(ctx, p, testRef, c.img, reg)
		var se *report.StepError
		if !errors.Is(err, c.want) || !errors.Is(err, ErrNotTrusted) || !errors.As(err, &se) {
			t.Errorf("%s: got %v, want %v in a StepError", c.name, err, c.want)
			continue
		}
		wantIn(t, c.name, err.Error(), c.text, c.img.Digest.String(), `rule "registry.test/ckpt" of policy.json`, "key "+good.pub,
			"cosign sign --key", "registry.test/ckpt/app@"+c.img.Digest.String(), "nothing was pulled")
	}
}

// TestCheckUncovered: a repository no rule covers is refused unless the
// default accepts; accept_unsigned exempts its prefix.
func TestCheckUncovered(t *testing.T) {
	ctx := context.Background()
	reg := newFakeRegistry()
	img := reg.image("x")
	p, err := Parse([]byte(`{"rules": [{"repository": "registry.test/scratch", "accept_unsigned": true}]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	v := &Verifier{}
	err = v.check(ctx, p, testRef, img, reg)
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("uncovered repository: got %v, want ErrRejected", err)
	}
	wantIn(t, "uncovered", err.Error(), "registry.test/ckpt", "default rejects", "add a rule for registry.test/ckpt")
	if err := v.check(ctx, p, "registry.test/scratch/a:v1", img, reg); err != nil {
		t.Errorf("accept_unsigned: %v", err)
	}
	p.Default = "accept"
	if err := v.check(ctx, p, testRef, img, reg); err != nil {
		t.Errorf("default accept: %v", err)
	}
}

func wantIn(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q lacks %q", what, got, w)
		}
	}
}
