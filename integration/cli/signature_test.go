package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/imagetrust/signtest"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"
)

// cosignKey is a signing key pair and its public key file (cosign.pub).
type cosignKey struct {
	kp  *sign.EphemeralKeypair
	pub string
}

func newCosignKey(t *testing.T, name string) *cosignKey {
	t.Helper()
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := kp.GetPublicKeyPem()
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(t.TempDir(), name+".pub")
	if err := os.WriteFile(pub, []byte(pem), 0o600); err != nil {
		t.Fatal(err)
	}
	return &cosignKey{kp: kp, pub: pub}
}

// signature is the bundle `cosign sign` makes for the manifest digest d.
func (k *cosignKey) signature(t *testing.T, repo string, d digest.Digest) []byte {
	t.Helper()
	return signtest.Bundle(t, k.kp, repo, d, signtest.CosignPredicate)
}

const sigstoreBundleType = "application/vnd.dev.sigstore.bundle.v0.3+json"

// attachSignature pushes sig as an artifact whose subject is the manifest
// d of ref's repository, as cosign's BUNDLE_SPEC lays it out.
func attachSignature(t *testing.T, ref string, d digest.Digest, sig []byte) {
	t.Helper()
	ctx := context.Background()
	repo, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	subject, err := repo.Resolve(ctx, d.String())
	if err != nil {
		t.Fatal(err)
	}
	layer := ocispec.Descriptor{MediaType: sigstoreBundleType, Digest: digest.FromBytes(sig), Size: int64(len(sig))}
	if err := repo.Push(ctx, layer, bytes.NewReader(sig)); err != nil {
		t.Fatal(err)
	}
	_, err = oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, sigstoreBundleType,
		oras.PackManifestOptions{Subject: &subject, Layers: []ocispec.Descriptor{layer}})
	if err != nil {
		t.Fatalf("attach the signature to %s: %v", d, err)
	}
}

// buildPush builds dir as ref on node n, pushes it and returns its digest.
func buildPush(t *testing.T, n *harness.ImgNode, dir, ref string) digest.Digest {
	t.Helper()
	n.Cryo(t, "image", "build", dir, ref)
	out := strings.TrimSpace(n.Cryo(t, "image", "push", ref))
	d, err := digest.Parse(out[strings.LastIndex(out, "\n")+1:])
	if err != nil {
		t.Fatalf("push printed no digest: %v\n%s", err, out)
	}
	return d
}

// smallCheckpoint is a fake CRIU directory of 1 MiB of random pages.
func smallCheckpoint(t *testing.T) string { return bigCheckpointDir(t, 1<<20) }

// wantNotPulled: a refused pull left no layer of ref in n's store.
func wantNotPulled(t *testing.T, a, n *harness.ImgNode, ref string) {
	t.Helper()
	layer := layerDigest(t, a, ref)
	if _, err := os.Stat(filepath.Join(n.Store, "blobs/sha256", strings.TrimPrefix(layer, "sha256:"))); err == nil {
		t.Errorf("layer %s of the refused %s is in the store", layer, ref)
	}
}

// TestImageSignature: under a policy that requires the key of ckpt/, a
// signed checkpoint pulls and restores and the digest verified is
// recorded; an unsigned image, one signed with another key, and a signed
// tag moved to another image (bare, then with the old digest's signature
// copied onto it) are refused before a layer moves, with the digest, the
// rule and the cosign command that would sign it.
func TestImageSignature(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	reg := harness.StartRegistry(t)
	good, other := newCosignKey(t, "good"), newCosignKey(t, "other")
	policy := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(policy, []byte(`{"rules": [{"repository": "`+reg.Addr+`/ckpt", "key": "`+good.pub+`"}]}`), 0o600)
	a := harness.NewNode(t, env)
	b := harness.NewNode(t, append(env, "CRYO_SIGNATURE_POLICY="+policy))
	repo := reg.Addr + "/ckpt"
	rule := `rule "` + repo + `" of ` + policy + " (key " + good.pub + ")"

	unsigned := repo + "/unsigned:v1"
	d := buildPush(t, a, smallCheckpoint(t), unsigned)
	harness.WantIn(t, b.CryoFails(t, "image", "pull", unsigned), "pull of "+unsigned+" failed at step verify its signature",
		string(d), "carries no signature", rule, "nothing was pulled", "cosign sign --key cosign.key "+repo+"/unsigned@"+string(d))
	wantNotPulled(t, a, b, unsigned)
	harness.WantIn(t, b.CryoFails(t, "inspect", unsigned), "inspect of "+unsigned, "carries no signature")

	byOther := repo + "/other:v1"
	d = buildPush(t, a, smallCheckpoint(t), byOther)
	attachSignature(t, byOther, d, other.signature(t, repo+"/other", d))
	harness.WantIn(t, b.CryoFails(t, "image", "pull", byOther), string(d), "none of the 1 signatures", rule)
	wantNotPulled(t, a, b, byOther)

	moved := repo + "/moved:v1"
	old := buildPush(t, a, smallCheckpoint(t), moved)
	sig := good.signature(t, repo+"/moved", old)
	attachSignature(t, moved, old, sig)
	d = buildPush(t, a, smallCheckpoint(t), moved)
	harness.WantIn(t, b.CryoFails(t, "image", "pull", moved), string(d), "carries no signature")
	attachSignature(t, moved, d, sig) // the old digest's valid signature, copied
	harness.WantIn(t, b.CryoFails(t, "image", "pull", moved), string(d), "none of the 1 signatures")
	wantNotPulled(t, a, b, moved)

	app, dir, tick := harness.CheckpointApp(t, env)
	signed := repo + "/app:v1"
	d = buildPush(t, a, dir, signed)
	attachSignature(t, signed, d, good.signature(t, repo+"/app", d))
	harness.WantIn(t, b.Cryo(t, "inspect", signed), string(d))
	work := filepath.Join(t.TempDir(), "work")
	out := b.Cryo(t, "image", "restore", "--pull", "--dir", work, signed)
	harness.WantIn(t, out, "verified "+signed+": "+string(d), rule)
	if !strings.HasSuffix(strings.TrimSpace(out), strconv.Itoa(app.PID)) {
		t.Fatalf("restore printed no pid %d:\n%s", app.PID, out)
	}
	app.WaitTick(t, tick+3)
}

// TestImageSignatureKeyFlag: without a policy, pulls are unverified as
// before; --signature-key requires that key's signature for one pull.
func TestImageSignatureKeyFlag(t *testing.T) {
	harness.RequireRoot(t)
	reg := harness.StartRegistry(t)
	good, other := newCosignKey(t, "good"), newCosignKey(t, "other")
	a, b := harness.NewNode(t, nil), harness.NewNode(t, []string{"CRYO_SIGNATURE_POLICY="})
	ref := reg.Addr + "/team/ckpt:v1"
	d := buildPush(t, a, smallCheckpoint(t), ref)
	attachSignature(t, ref, d, good.signature(t, reg.Addr+"/team/ckpt", d))

	harness.WantIn(t, b.CryoFails(t, "image", "pull", "--signature-key", other.pub, ref), string(d), "none of the 1 signatures", "--signature-key "+other.pub)
	harness.WantIn(t, b.Cryo(t, "image", "pull", "--signature-key", good.pub, ref), "verified "+ref+": "+string(d), string(d))
	if _, err := os.Stat(filepath.Join(b.Store, "blobs/sha256", d.Encoded())); err != nil {
		t.Errorf("the verified manifest is not in the store: %v", err)
	}
	out := harness.NewNode(t, nil).Cryo(t, "image", "pull", ref)
	if strings.Contains(out, "verified") {
		t.Errorf("a pull without a policy claims a verification:\n%s", out)
	}
}

// TestAnnotationSignature: the shim's restore of a pod's checkpoint image
// follows the signature policy of containerd's environment too. A node
// whose annotation policy allows the namespace the repository, and whose
// signature policy wants a key for it, refuses the unsigned image before
// it pulls anything; once the digest is signed, the same pod spec
// restores and goes on from the checkpoint.
func TestAnnotationSignature(t *testing.T) {
	reg := harness.StartRegistry(t)
	ck := harness.CheckpointOnNode1(t, reg, reg.Addr+"/cryo/app:v1")
	key := newCosignKey(t, "node")
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	t.Setenv("CRYO_IMAGE_STORE", store)
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	harness.UsePolicy(t, config.AnnotationPolicy{Enabled: true, InsecureRegistries: []string{reg.Addr},
		Namespaces: map[string]config.NamespaceRule{"team": {Repositories: []string{reg.Addr + "/ckpt/"}}}})
	sigPolicy := filepath.Join(dir, "policy.json")
	os.WriteFile(sigPolicy, []byte(`{"rules": [{"repository": "`+reg.Addr+`/ckpt", "key": "`+key.pub+`"}]}`), 0o600)
	t.Setenv("CRYO_SIGNATURE_POLICY", sigPolicy)
	n := harness.StartCRINodeAt(t, 1).With(t)
	d := digest.Digest(ck.Ref[strings.LastIndex(ck.Ref, "@")+1:])

	p := n.NewPodIn("team", "unsigned", map[string]string{imagerestore.AnnImage: ck.Ref})
	harness.WantIn(t, p.Refused().Error(), "verify the signature of the checkpoint image "+ck.Ref, string(d), "carries no signature",
		"permission denied", "cosign sign --key")
	p.Remove()
	if _, err := os.Stat(filepath.Join(store, "blobs/sha256", d.Encoded())); err == nil {
		t.Errorf("the unsigned image's manifest was pulled into the node's store")
	}

	attachSignature(t, ck.Tag, d, key.signature(t, reg.Addr+"/ckpt/cri-source", d))
	p = n.NewPodIn("team", "signed", map[string]string{imagerestore.AnnImage: ck.Ref})
	if err := p.Create(harness.TestImage); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("signed checkpoint image refused: %v\n%s", err, harness.LastLines(n.Log(), 30))
	}
	n.AssertContinues(p, ck)
	p.Remove()
}
