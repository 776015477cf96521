package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ctrdcontent "github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/config"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// partsStore is a containerd content store (containerd's own local
// store, as the shim reads through containerd's API) holding one
// checkpoint part whose tar write() writes, and the runnable manifest that
// lists it.
func partsStore(t *testing.T, write func(tw *tar.Writer) error) (ctrdcontent.Store, ocispec.Manifest) {
	t.Helper()
	var blob bytes.Buffer
	zw, err := zstd.NewWriter(&blob)
	if err != nil {
		t.Fatal(err)
	}
	plain := digest.SHA256.Digester()
	tw := tar.NewWriter(io.MultiWriter(zw, plain.Hash()))
	if err := write(tw); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	cs, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	desc := ocispec.Descriptor{MediaType: MediaTypeCheckpointPart, Digest: digest.FromBytes(blob.Bytes()), Size: int64(blob.Len()),
		Annotations: map[string]string{AnnPartDiffID: plain.Digest().String(), AnnLayerPart: PartPages}}
	if err := ctrdcontent.WriteBlob(context.Background(), cs, "part", bytes.NewReader(blob.Bytes()), desc); err != nil {
		t.Fatal(err)
	}
	man := ocispec.Manifest{Layers: []ocispec.Descriptor{desc}, Annotations: map[string]string{AnnLayout: LayoutRunnable}}
	return cs, bindConfig(t, cs, man)
}

// bindConfig writes into cs the config that names man's parts, as
// `cryo image build --runnable` does, and returns man pointing at it: the
// caps are reached only past the parts' check.
func bindConfig(t testing.TB, cs ctrdcontent.Store, man ocispec.Manifest) ocispec.Manifest {
	t.Helper()
	data, err := json.Marshal(bindParts(ocispec.Image{}, man.Layers, man.Annotations))
	if err != nil {
		t.Fatal(err)
	}
	man.Config = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := ctrdcontent.WriteBlob(context.Background(), cs, "config-"+man.Config.Digest.Encoded(), bytes.NewReader(data), man.Config); err != nil {
		t.Fatal(err)
	}
	return man
}

// emptyFiles writes n empty files under checkpoint/.
func emptyFiles(n int) func(tw *tar.Writer) error {
	return func(tw *tar.Writer) error {
		for i := 0; i < n; i++ {
			if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("checkpoint/f%d.img", i), Typeflag: tar.TypeReg, Mode: 0o600}); err != nil {
				return err
			}
		}
		return nil
	}
}

// dirFiles writes the files of dir under checkpoint/.
func dirFiles(dir string) func(tw *tar.Writer) error {
	return func(tw *tar.Writer) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Name: "checkpoint/" + e.Name(), Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(data))}); err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
		}
		return nil
	}
}

// A part of 300 000 empty files is refused at the cap that the node's
// config sets, with an error naming the part, the count, the cap and the
// variable that raises it; with the cap lowered to 1000 the refusal takes
// well under a second, since nothing after the cap is read.
func TestUnpackPartsRefusesManyEntries(t *testing.T) {
	cs, man := partsStore(t, emptyFiles(300_000))
	cfg := config.Config{Unpack: config.UnpackLimits{MaxEntries: 1000}}
	dir := t.TempDir()
	began := time.Now()
	err := UnpackPartsWithin(context.Background(), cs, man, dir, filedigest.Records{}, LimitsFrom(cfg))
	elapsed := time.Since(began)
	var le *archive.LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrUnpackLimit) || errors.Is(err, ErrIntegrity) || le.Count != 1001 || le.Cap != 1000 {
		t.Fatalf("got %v, want a LimitError at entry 1001 of 1000, not an integrity failure", err)
	}
	for _, want := range []string{"checkpoint part " + man.Layers[0].Digest.String(), "more than 1000 entries", config.EnvUnpackMaxEntries, "(now 1000)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	// Refused at the cap, not after the whole part: no more files were
	// made than the cap allows (a wall-clock bound would be a timing
	// test; the time is logged).
	made := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			made++
		}
		return nil
	})
	if made > 1000 {
		t.Fatalf("%d files were unpacked before the refusal, want at most the cap of 1000", made)
	}
	t.Logf("300000 empty files refused at a cap of 1000 in %s, %d files made", elapsed, made)
}

// With the default cap, the same part is refused at entry 100 001.
func TestUnpackPartsDefaultCap(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100 000 files")
	}
	cs, man := partsStore(t, emptyFiles(300_000))
	began := time.Now()
	err := UnpackPartsWithin(context.Background(), cs, man, t.TempDir(), filedigest.Records{}, LimitsFrom(config.Config{}))
	var le *archive.LimitError
	if !errors.As(err, &le) || le.Cap != archive.DefaultMaxEntries {
		t.Fatalf("got %v, want a LimitError at the default cap", err)
	}
	t.Logf("300000 empty files refused at the default cap of %d in %s", archive.DefaultMaxEntries, time.Since(began))
}

// A checkpoint's part passes the default limits and its budget, and its
// files are verified against cryo's manifest.
func TestUnpackPartsNormalCheckpoint(t *testing.T) {
	src := fakeCheckpoint(t)
	cs, man := partsStore(t, dirFiles(src))
	var total int64
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		fi, _ := e.Info()
		total += fi.Size()
	}
	man.Annotations[AnnSizeTotal] = fmt.Sprint(total)
	man = bindConfig(t, cs, man)
	dir := t.TempDir()
	if err := UnpackPartsWithin(context.Background(), cs, man, dir, filedigest.Records{}, LimitsFrom(config.Config{})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(CRIUDir(dir), "pages-2.img")); err != nil {
		t.Fatal(err)
	}
}

// A restore's deadline that passes during the unpack stops it at the next
// entry with the deadline as the cause: not a corrupt layer.
func TestUnpackPartsStopsAtDeadline(t *testing.T) {
	cs, man := partsStore(t, emptyFiles(300_000))
	ctx, cancel := context.WithTimeoutCause(context.Background(), 100*time.Millisecond, config.ErrRestoreDeadline)
	defer cancel()
	began := time.Now()
	err := UnpackPartsWithin(ctx, cs, man, t.TempDir(), filedigest.Records{}, archive.Limits{MaxEntries: 1 << 30})
	if !errors.Is(err, config.ErrRestoreDeadline) || errors.Is(err, ErrIntegrity) {
		t.Fatalf("got %v, want the restore's deadline, not an integrity failure", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("stopped after %s, want right after the 100ms deadline", d)
	}
}

// Entries spread over several parts, each under the cap, are bounded
// together: the image's layers share the cap.
func TestUnpackPartsCapAcrossParts(t *testing.T) {
	cs, man := partsStore(t, emptyFiles(600))
	second, man2 := partsStore(t, func(tw *tar.Writer) error {
		for i := 0; i < 600; i++ {
			if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("more/f%d", i), Typeflag: tar.TypeReg, Mode: 0o600}); err != nil {
				return err
			}
		}
		return nil
	})
	ra, err := second.ReaderAt(context.Background(), man2.Layers[0])
	if err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, ra.Size())
	if _, err := ra.ReadAt(blob, 0); err != nil {
		t.Fatal(err)
	}
	ra.Close()
	if err := ctrdcontent.WriteBlob(context.Background(), cs, "part2", bytes.NewReader(blob), man2.Layers[0]); err != nil {
		t.Fatal(err)
	}
	man.Layers = append(man.Layers, man2.Layers[0])
	man = bindConfig(t, cs, man)
	err = UnpackPartsWithin(context.Background(), cs, man, t.TempDir(), filedigest.Records{}, archive.Limits{MaxEntries: 1000})
	var le *archive.LimitError
	if !errors.As(err, &le) || le.Count != 1001 || !le.Image || !strings.Contains(err.Error(), "checkpoint part "+man2.Layers[0].Digest.String()) ||
		!strings.Contains(err.Error(), "brings the image's layers to more than 1000 entries") {
		t.Fatalf("two parts of 600 entries under a cap of 1000: %v, want the image-wide refusal at 1001", err)
	}
}
