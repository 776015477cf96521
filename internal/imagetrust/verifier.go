package imagetrust

import (
	"context"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Verifier applies the signature policy to the images a command pulls
// (ociimage.TransferOptions.Verify). The policy is read at each pull, so
// that a fix of the file applies at once.
type Verifier struct {
	// PolicyFile is --policy; "": $CRYO_SIGNATURE_POLICY, else
	// DefaultPolicy when it exists.
	PolicyFile string
	// KeyFile is --signature-key: a signature by this key is required for
	// every repository, in place of the policy file.
	KeyFile string
	Environ []string // where EnvPolicy is looked up; nil: os.Environ()
	// Op names the operation in errors ("pull", "inspect"); "": "pull".
	Op string
	// Log receives the record of each decision (the digest verified and
	// the rule); nil: none.
	Log func(format string, a ...any)
}

const (
	step         = "verify its signature"
	policyRemedy = "fix the policy (`cryo doctor` checks it; docs/images.md, \"Verifying signatures\")"
)

// policy is the one in force; nil when none is configured.
func (v *Verifier) policy() (*Policy, error) {
	if v.KeyFile != "" {
		return KeyPolicy(v.KeyFile)
	}
	return LoadConfigured(v.PolicyFile, v.Environ)
}

// VerifyPull judges the image ref resolved to manifest, in repo, before
// any layer moves: nil when no policy is configured, when the policy
// exempts the repository, or when a signature by the rule's signer covers
// manifest's digest.
func (v *Verifier) VerifyPull(ctx context.Context, ref string, manifest ocispec.Descriptor, repo *remote.Repository) error {
	p, err := v.policy()
	if err != nil {
		return v.refuse(ref, err, policyRemedy)
	}
	if p == nil {
		return nil
	}
	return v.check(ctx, p, ref, manifest, repo)
}

// Pin resolves ref in its registry and judges it as VerifyPull does. It
// returns ref pinned to the digest verified (host/name@digest), for a
// caller that reads the image again; ref itself when no policy is in
// force.
func (v *Verifier) Pin(ctx context.Context, ref string, o ociimage.RemoteOptions) (string, error) {
	p, err := v.policy()
	if err != nil {
		return "", v.refuse(ref, err, policyRemedy)
	}
	if p == nil {
		return ref, nil
	}
	repo, err := ociimage.OpenRepository(ref, o)
	if err != nil {
		return "", err
	}
	d, err := repo.Resolve(ctx, repo.Reference.ReferenceOrDefault())
	if err != nil {
		return "", v.refuse(ref, fmt.Errorf("resolve %s: %w", ref, err), "check the reference, the registry and your credentials")
	}
	if err := v.check(ctx, p, ref, d, repo); err != nil {
		return "", err
	}
	return repository(ref) + "@" + d.Digest.String(), nil
}

// VerifyPinned judges the image ref pinned to d, under the policy of this
// process's environment: the shim's restore of a pod's checkpoint image,
// before it looks for the image in the store or pulls it.
func VerifyPinned(ctx context.Context, ref string, d digest.Digest, o ociimage.RemoteOptions) error {
	v := &Verifier{}
	p, err := v.policy()
	if err != nil || p == nil {
		if err != nil {
			return v.refuse(ref, err, "the node's admin must fix the signature policy ($"+EnvPolicy+" in containerd's environment, else "+DefaultPolicy+"; `cryo doctor` checks it)")
		}
		return nil
	}
	repo, err := ociimage.OpenRepository(ref, o)
	if err != nil {
		return err
	}
	return v.check(ctx, p, ref, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: d}, repo)
}

// check applies p's rule for ref's repository to the digest of manifest.
func (v *Verifier) check(ctx context.Context, p *Policy, ref string, manifest ocispec.Descriptor, repo Registry) error {
	name := repository(ref)
	rule, ok := p.Match(name)
	switch {
	case !ok && p.accepts():
		v.log("%s: %s pulled unverified: no rule of %s covers %s, and its default accepts", ref, manifest.Digest, p.Source, name)
		return nil
	case !ok:
		return v.refuse(ref, fmt.Errorf("%s (%s): no rule of %s covers %s, and its default rejects: %w", ref, manifest.Digest, p.Source, name, ErrRejected),
			"add a rule for "+name+" to "+p.Source+" (docs/images.md, \"Verifying signatures\"), or pull from a repository it covers")
	case rule.AcceptUnsigned:
		v.log("%s: %s pulled unverified: %s", ref, manifest.Digest, rule.describe(p))
		return nil
	}
	found, err := findBundles(ctx, repo, manifest)
	if err != nil {
		return v.refuse(ref, fmt.Errorf("%s: %w: %w", rule.describe(p), err, ErrNotTrusted), "check the registry and your credentials, and retry")
	}
	var why []string
	for _, c := range found {
		if c.err == nil {
			c.err = rule.check.verify(c.bundle, manifest.Digest)
		}
		if c.err == nil {
			v.log("verified %s: %s, signature %s, %s", ref, manifest.Digest, c.manifest.Digest, rule.describe(p))
			return nil
		}
		why = append(why, fmt.Sprintf("signature %s: %v", c.manifest.Digest, c.err))
	}
	return v.refuse(ref, unverified(ref, manifest.Digest, rule.describe(p), why), signRemedy(rule, name, manifest.Digest))
}

// unverified says why no signature of d verified.
func unverified(ref string, d digest.Digest, rule string, why []string) error {
	if len(why) == 0 {
		return fmt.Errorf("%s (%s) carries no signature (no Sigstore bundle among its referrers), and %s requires one: %w", ref, d, rule, ErrUnsigned)
	}
	return fmt.Errorf("none of the %d signatures of %s (%s) verifies under %s: %s: %w", len(why), ref, d, rule, strings.Join(why, "; "), ErrBadSignature)
}

// signRemedy says how to sign the digest so that the rule accepts it.
func signRemedy(r *Rule, repo string, d digest.Digest) string {
	at := repo + "@" + d.String()
	if r.Key != "" {
		return "sign that digest with the private key of " + r.Key + ": `cosign sign --key cosign.key " + at +
			"` (cosign 3), or pull an image that is signed"
	}
	return "sign that digest keyless as " + r.Identity.String() + ": `cosign sign " + at + "` (cosign 3), or pull an image that is signed"
}

func (v *Verifier) refuse(ref string, err error, remedy string) error {
	op, outcome := v.Op, "nothing was pulled"
	if op == "" {
		op = "pull"
	}
	if op != "pull" {
		outcome = ""
	}
	return &report.StepError{Op: op, ID: ref, Step: step, Err: err, Outcome: outcome, Remedy: remedy}
}

func (v *Verifier) log(format string, a ...any) {
	if v.Log != nil {
		v.Log(format, a...)
	}
}

// repository is host[:port]/name of ref, as rules name it.
func repository(ref string) string {
	r, err := registry.ParseReference(ref)
	if err != nil {
		return ref
	}
	return r.Registry + "/" + r.Repository
}
