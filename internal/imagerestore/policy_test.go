package imagerestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

// policy allows tenant-a its repositories on reg.example (with the node's
// credentials) and on a loopback registry, and lists nothing as insecure
// but one other loopback port.
func policy(t *testing.T) Options {
	t.Helper()
	p, err := config.ParseAnnotationPolicy([]byte(`{"enabled": true,
	  "namespaces": {
	    "tenant-a": {"repositories": ["reg.example/tenant-a", "127.0.0.1:1/tenant-a"], "use_node_credentials": true},
	    "tenant-b": {"repositories": ["reg.example/tenant-b"]},
	    "":         {"repositories": ["127.0.0.1:2/plain"]}},
	  "insecure_registries": ["127.0.0.1:2"]}`))
	if err != nil {
		t.Fatal(err)
	}
	p.Source = "/etc/cryo/annotation-restore.json"
	return Options{Policy: p, AuthFiles: []string{"/etc/cryo/auth.json"}, Store: filepath.Join(t.TempDir(), "store"), RestoreDir: t.TempDir(), Attempts: 1}
}

// The rule, in order: the path on, a digest-pinned reference, its
// repository allowed to the pod's namespace. Each refusal is a StepError
// with a remedy, of the class the kubelet should see.
func TestAuthorizeRefusals(t *testing.T) {
	pinned := "reg.example/tenant-a/app@sha256:" + sha
	off := policy(t)
	off.Policy.Enabled = false
	broken := policy(t)
	broken.PolicyErr = config.ErrBadPolicy
	for _, c := range []struct {
		name   string
		req    Request
		o      Options
		want   error
		remedy string
	}{
		{"off by default", Request{Ref: pinned, Namespace: "tenant-a"}, Options{}, ErrRestoreOff, config.EnvAnnotationRestore},
		{"disabled", Request{Ref: pinned, Namespace: "tenant-a"}, off, ErrRestoreOff, `"enabled": true`},
		{"unusable policy", Request{Ref: pinned, Namespace: "tenant-a"}, broken, ErrRestoreOff, "cryo doctor"},
		{"tag", Request{Ref: "reg.example/tenant-a/app:v1", Namespace: "tenant-a"}, policy(t), ErrNotPinned, "cryo image push"},
		{"latest", Request{Ref: "reg.example/tenant-a/app", Namespace: "tenant-a"}, policy(t), ErrNotPinned, "@sha256:"},
		{"bad digest", Request{Ref: "reg.example/tenant-a/app@sha256:00", Namespace: "tenant-a"}, policy(t), ErrBadAnnotation, "@sha256:"},
		{"another namespace's repository", Request{Ref: pinned, Namespace: "tenant-b"}, policy(t), ErrNotAllowed, "admin"},
		{"a namespace without an entry", Request{Ref: pinned, Namespace: "tenant-c"}, policy(t), ErrNotAllowed, "admin"},
		{"outside Kubernetes", Request{Ref: pinned}, policy(t), ErrNotAllowed, "admin"},
		{"prefix is not a path boundary", Request{Ref: "reg.example/tenant-ab/app@sha256:" + sha, Namespace: "tenant-a"}, policy(t), ErrNotAllowed, "admin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Authorize(c.req, "container main (3f2a)", c.o)
			var se *report.StepError
			if !errors.Is(err, c.want) || !errors.As(err, &se) || !strings.Contains(se.Remedy, c.remedy) || se.ID != "container main (3f2a)" {
				t.Fatalf("error %v (remedy %q), want %v with a remedy naming %q", err, remedyOf(err), c.want, c.remedy)
			}
			t.Log(err)
		})
	}
	_, err := Authorize(Request{Ref: pinned, Namespace: "tenant-b"}, "c", policy(t))
	if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), `namespace "tenant-b"`) {
		t.Errorf("another namespace's repository: %v, want PermissionDenied naming the namespace", err)
	}
}

// What is allowed: the canonical pinned reference (a tag beside the
// digest dropped), the node's credentials only where the rule says so,
// plain HTTP only for a listed registry, and never because it is loopback.
func TestAuthorizeSource(t *testing.T) {
	o := policy(t)
	src, err := Authorize(Request{Ref: "reg.example/tenant-a/app:v1@sha256:" + sha, Namespace: "tenant-a"}, "c", o)
	if err != nil {
		t.Fatal(err)
	}
	if src.Ref != "reg.example/tenant-a/app@sha256:"+sha || src.Digest.Encoded() != sha || !src.NodeCredentials ||
		len(src.Remote.AuthFiles) != 1 || src.Remote.PlainHTTP || !src.Remote.NoLoopbackHTTP {
		t.Errorf("tenant-a: %+v", src)
	}
	src, err = Authorize(Request{Ref: "127.0.0.1:1/tenant-a/app@sha256:" + sha, Namespace: "tenant-a"}, "c", o)
	if err != nil || src.Remote.PlainHTTP || !src.Remote.NoLoopbackHTTP {
		t.Errorf("loopback, not listed: %+v %v, want HTTPS", src, err)
	}
	src, err = Authorize(Request{Ref: "127.0.0.1:2/plain/app@sha256:" + sha}, "c", o)
	if err != nil || !src.Remote.PlainHTTP || src.NodeCredentials || src.Remote.AuthFiles != nil {
		t.Errorf("listed insecure, no node credentials: %+v %v", src, err)
	}
}

// A namespace that the policy does not allow is refused before the node's
// store is looked at, even when the store holds the very image another
// namespace's restore pulled.
func TestPrepareRefusedBeforeStore(t *testing.T) {
	o := policy(t)
	ref, _ := storeManifest(t, o.Store, "reg.example/tenant-a/app", "")
	_, err := Prepare(context.Background(), Request{Ref: ref, Namespace: "tenant-b"}, "c", o)
	if !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("tenant-b with tenant-a's stored image: %v, want ErrNotAllowed", err)
	}
	o.Store = filepath.Join(t.TempDir(), "untouched")
	if _, err := Prepare(context.Background(), Request{Ref: ref, Namespace: "tenant-b"}, "c", o); !errors.Is(err, ErrNotAllowed) {
		t.Fatal(err)
	}
	if _, err := os.Stat(o.Store); err == nil {
		t.Error("a refused restore opened the image store")
	}
}

// The store's entry under the pinned name is used only when it is the
// pinned digest: one that is not (a substituted entry) is not unpacked;
// the image is pulled instead (here from a registry that does not exist,
// so the pull fails).
func TestPrepareStoreDigest(t *testing.T) {
	o := policy(t)
	ref, _ := storeManifest(t, o.Store, "127.0.0.1:1/tenant-a/app", "")
	// The pinned digest, present: the store's copy is read without a pull
	// (and refused since this manifest is no checkpoint).
	_, err := Prepare(context.Background(), Request{Ref: ref, Namespace: "tenant-a"}, "c", o)
	if err == nil || !strings.Contains(err.Error(), "step read the checkpoint image "+ref) || !errors.Is(err, ociimage.ErrNotCheckpointImage) {
		t.Fatalf("stored pinned image: %v, want it read from the store", err)
	}
	// Another manifest tagged with that pinned name: never used.
	o.Store = filepath.Join(t.TempDir(), "other")
	_, substitute := storeManifest(t, o.Store, "127.0.0.1:1/tenant-a/app", "other")
	tagAs(t, o.Store, substitute, ref)
	_, err = Prepare(context.Background(), Request{Ref: ref, Namespace: "tenant-a"}, "c", o)
	if err == nil || !strings.Contains(err.Error(), "step pull the checkpoint image "+ref) {
		t.Fatalf("a substituted store entry: %v, want a pull (which fails here)", err)
	}
	if entries, _ := os.ReadDir(o.RestoreDir); len(entries) != 0 {
		t.Errorf("work directories left: %d", len(entries))
	}
}

// A tag of the same repository that the node pulled or built counts when
// its digest is the pin; the same digest under another repository does
// not: tenant-b naming its own repository with the digest of tenant-a's
// image, which the store holds, gets a pull (which fails here), not
// tenant-a's image.
func TestPrepareStoreRepository(t *testing.T) {
	o := policy(t)
	_, d := storeManifest(t, o.Store, "127.0.0.1:1/tenant-a/app", "")
	tagAs(t, o.Store, d, "127.0.0.1:1/tenant-a/app:v1")
	tagAs(t, o.Store, d, "reg.example/tenant-a/secret:v1")
	ref := "127.0.0.1:1/tenant-a/app@" + d.Digest.String()
	_, err := Prepare(context.Background(), Request{Ref: ref, Namespace: "tenant-a"}, "c", o)
	if err == nil || !strings.Contains(err.Error(), "step read the checkpoint image") {
		t.Fatalf("a stored tag of the pinned repository: %v, want it read from the store", err)
	}

	o.Store = filepath.Join(t.TempDir(), "other")
	_, d = storeManifest(t, o.Store, "127.0.0.1:1/tenant-a/secret", "secret")
	ref = "reg.example/tenant-b/app@" + d.Digest.String()
	_, err = Prepare(context.Background(), Request{Ref: ref, Namespace: "tenant-b"}, "c", o)
	if err == nil || !strings.Contains(err.Error(), "step pull the checkpoint image "+ref) {
		t.Fatalf("another repository's stored image by its digest: %v, want a pull", err)
	}
}

// storeManifest puts a small manifest into an OCI store at root, tagged
// with its own pinned reference under repo, and returns that reference and
// its descriptor.
func storeManifest(t *testing.T, root, repo, salt string) (string, ocispec.Descriptor) {
	t.Helper()
	s, err := oci.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := content.NewDescriptorFromBytes(ocispec.MediaTypeImageConfig, []byte("{}"))
	must(t, s.Push(ctx, cfg, strings.NewReader("{}")))
	body := `{"schemaVersion":2,"mediaType":"` + ocispec.MediaTypeImageManifest + `","config":{"mediaType":"` + cfg.MediaType +
		`","digest":"` + cfg.Digest.String() + `","size":2},"layers":[],"annotations":{"salt":"` + salt + `"}}`
	man := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, []byte(body))
	must(t, s.Push(ctx, man, strings.NewReader(body)))
	ref := repo + "@" + man.Digest.String()
	must(t, s.Tag(ctx, man, ref))
	return ref, man
}

// tagAs names d, in the store at root, name.
func tagAs(t *testing.T, root string, d ocispec.Descriptor, name string) {
	t.Helper()
	s, err := oci.New(root)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Tag(context.Background(), d, name))
}

func remedyOf(err error) string {
	var se *report.StepError
	if errors.As(err, &se) {
		return se.Remedy
	}
	return ""
}
