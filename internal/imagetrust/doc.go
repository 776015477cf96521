// Package imagetrust decides whether cryo may use a checkpoint image that
// it pulls by itself (`cryo image pull`, `cryo image restore --pull`,
// `cryo restore --image --pull`, `cryo inspect REF`, and the shim's restore
// from a pod's annotation): a checkpoint carries process memory that is
// run as-is, so where the node's policy asks for it, the image's manifest
// digest must carry a signature by a trusted signer before a layer moves.
//
// Signatures are Sigstore bundles as cosign 3 attaches them (cosign's
// BUNDLE_SPEC): an OCI artifact whose subject is the image's manifest,
// found through the registry's referrers API or its referrers tag
// (sha256-<digest>), holding a DSSE envelope with an in-toto statement of
// predicate type https://sigstore.dev/cosign/sign/v1 whose subject is that
// digest. sigstore-go verifies them, offline: with a public key, or
// keyless against a trusted root (trusted_root.json) and a certificate
// identity, never reaching a TUF mirror.
//
// Why sigstore-go and not containers/image's policy.json: containers/image
// finds sigstore signatures only through its docker transport (its OCI
// layout transport has none), so it would fetch the manifest a second
// time through another client, with a registries.d configuration to
// enable attachments; and it reads only the older `.sig` tag format.
// sigstore-go verifies the bundle that cryo's own registry client (oras)
// fetched, for the digest that client is about to copy, with no second
// transport; cryo keeps its own small policy file for which repository
// needs which signer. See docs/images.md, "Verifying signatures".
package imagetrust
