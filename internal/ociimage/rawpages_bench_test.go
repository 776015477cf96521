package ociimage

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	ctrdcontent "github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/klauspost/compress/zstd"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/manifest"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
)

// BenchmarkPartsLayout measures a runnable image's checkpoint parts in
// both layouts for one pages file of $CRYO_BENCH_PAGES_MIB (default 256)
// MiB, half random bytes and half a repeating pattern (memory after the
// zero pages are gone: some of it compresses, most does not):
//
//   - build/compressed, build/blob: the parts written into cryo's store
//     (tar, parallel zstd, temporary file and rename; or one copy of the
//     file), reported with the bytes a registry receives;
//   - restore/compressed, restore/blob-linked, restore/blob-copied: the
//     parts laid out from containerd's own content store into a work
//     directory and every CRIU file checked against cryo's manifest, as
//     the shim does;
//   - hash: that manifest check alone, the floor of every restore.
//
// The page cache is warm throughout: it measures CPU and copies, not the
// disk.
func BenchmarkPartsLayout(b *testing.B) {
	mib := 256
	if v, err := strconv.Atoi(os.Getenv("CRYO_BENCH_PAGES_MIB")); err == nil && v > 0 {
		mib = v
	}
	src := benchCheckpoint(b, int64(mib)<<20)
	s, err := OpenSource(src, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	size := int64(mib) << 20
	for _, compress := range []bool{true, false} {
		layout := map[bool]string{true: "compressed", false: "blob"}[compress]
		var descs []ocispec.Descriptor
		var st *Store
		parent := b.TempDir() // the last build's store outlives its sub-benchmark
		b.Run("build/"+layout, func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				st, err = OpenStore(context.Background(), filepath.Join(parent, fmt.Sprint("store-", i)))
				if err != nil {
					b.Fatal(err)
				}
				o := BuildOptions{Ref: "localhost/bench:1", CompressPages: compress, Level: zstd.SpeedFastest}
				if descs, err = st.buildParts(context.Background(), s, o); err != nil {
					b.Fatal(err)
				}
			}
			var n int64
			for _, d := range descs {
				n += d.Size
			}
			b.ReportMetric(float64(n)/(1<<20), "registry-MiB")
		})
		cs, man, blobs := benchContentStore(b, st, descs)
		restores := map[string]string{"compressed": ""}
		if !compress {
			restores = map[string]string{"blob-linked": blobs, "blob-copied": ""}
		}
		for name, blobDir := range restores {
			b.Run("restore/"+name, func(b *testing.B) {
				b.SetBytes(size)
				for i := 0; i < b.N; i++ {
					dir, err := os.MkdirTemp(b.TempDir(), "work-")
					if err != nil {
						b.Fatal(err)
					}
					if err := UnpackPartsFrom(context.Background(), cs, man, dir, filedigest.Records{}, PartsOptions{BlobDir: blobDir}); err != nil {
						b.Fatal(err)
					}
					os.RemoveAll(dir)
				}
			})
		}
	}
	b.Run("hash", func(b *testing.B) {
		b.SetBytes(size)
		m, err := manifest.Read(src)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			if err := filedigest.Verify(src, m.Digests); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchCheckpoint is a CRIU-looking directory with one pages file of size
// bytes and cryo's manifest.
func benchCheckpoint(b *testing.B, size int64) string {
	dir := filepath.Join(b.TempDir(), "ckpt")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("inventory"), 0o600)
	data := make([]byte, size)
	rand.Read(data[:size/2])
	for i := size / 2; i < size; i++ {
		data[i] = byte(i % 251)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages-1.img"), data, 0o600); err != nil {
		b.Fatal(err)
	}
	m := manifest.New("process")
	var err error
	if m.Digests, err = filedigest.Files(dir); err != nil {
		b.Fatal(err)
	}
	if err := manifest.Write(dir, m); err != nil {
		b.Fatal(err)
	}
	return dir
}

// benchContentStore copies the parts built in st into a containerd local
// content store, as a pull does, and returns it with the bound runnable
// manifest and its blobs directory.
func benchContentStore(b *testing.B, st *Store, descs []ocispec.Descriptor) (ctrdcontent.Store, ocispec.Manifest, string) {
	root := b.TempDir()
	cs, err := local.NewStore(root)
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range descs {
		f, err := os.Open(st.blobPath(d))
		if err != nil {
			b.Fatal(err)
		}
		err = ctrdcontent.WriteBlob(context.Background(), cs, d.Digest.String(), f, d)
		f.Close()
		if err != nil {
			b.Fatal(fmt.Errorf("%s: %w", d.Digest, err))
		}
	}
	man := ocispec.Manifest{Layers: descs, Annotations: map[string]string{AnnLayout: LayoutRunnable}}
	return cs, bindConfig(b, cs, man), filepath.Join(root, "blobs")
}
