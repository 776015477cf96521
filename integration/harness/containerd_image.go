package harness

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestImage is the name the test image is imported under.
const TestImage = "localhost/cryo/fakecuda:test"

// ociBlob is one blob of an OCI image layout.
type ociBlob struct {
	mediaType string
	data      []byte
}

func (b ociBlob) digest() string {
	sum := sha256.Sum256(b.data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (b ociBlob) descriptor() map[string]any {
	return map[string]any{"mediaType": b.mediaType, "digest": b.digest(), "size": len(b.data)}
}

// buildImageTar writes an OCI image layout archive of rootfs (one
// uncompressed layer) that `ctr image import` accepts: no registry needed.
func buildImageTar(t testing.TB, rootfs, out string) {
	t.Helper()
	BuildImageTarAs(t, rootfs, out, TestImage, []string{"/bin/fakecuda-app", "100"})
}

// BuildImageTarAs is buildImageTar for an image of another name and command.
func BuildImageTarAs(t testing.TB, rootfs, out, name string, cmd []string) {
	t.Helper()
	layer := ociBlob{"application/vnd.oci.image.layer.v1.tar", tarDir(t, rootfs)}
	config := jsonBlob(t, "application/vnd.oci.image.config.v1+json", map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Cmd": cmd, "Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layer.digest()}},
	})
	manifest := jsonBlob(t, "application/vnd.oci.image.manifest.v1+json", map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": config.descriptor(), "layers": []any{layer.descriptor()},
	})
	desc := manifest.descriptor()
	desc["platform"] = map[string]string{"architecture": "amd64", "os": "linux"}
	desc["annotations"] = map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "test"}
	index := map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{desc}}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	addFile(t, tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	addFile(t, tw, "index.json", MustJSON(t, index))
	for _, b := range []ociBlob{layer, config, manifest} {
		addFile(t, tw, "blobs/sha256/"+b.digest()[len("sha256:"):], b.data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func jsonBlob(t testing.TB, mediaType string, v any) ociBlob {
	return ociBlob{mediaType, MustJSON(t, v)}
}

func MustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func addFile(t testing.TB, tw *tar.Writer, name string, data []byte) {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
}

// tarDir packs a directory tree (files, directories, symlinks) as a layer.
func tarDir(t testing.TB, root string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		return addEntry(tw, root, path, d)
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func addEntry(tw *tar.Writer, root, path string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	link := ""
	if info.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(path); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(root, path)
	hdr.Name = filepath.ToSlash(rel)
	hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// importTestImage builds the busybox + fakecuda-app image and imports it.
func (d *Daemon) ImportTestImage() {
	d.T.Helper()
	dir := filepath.Join(d.Dir, "image")
	NewRootfs(d.T, dir)
	archive := filepath.Join(dir, "image.tar")
	buildImageTar(d.T, filepath.Join(dir, "rootfs"), archive)
	d.Ctr("images", "import", "--all-platforms", archive)
	d.Ctr("images", "check")
}
