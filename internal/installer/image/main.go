// Command image builds the node installer's OCI image without a
// container engine: one layer holding the cryo binary at
// /usr/local/bin/cryo, its names, and the shared libraries it loads (ldd),
// with `cryo node install --wait` as its command; and cryo-k8s (the chart's
// controller and node agent run it from this image) with its link
// kubectl-cryo, written as an OCI
// layout in a tar that `ctr images import` loads and a registry client
// pushes (`make installer-image`).
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// names are the links to cryo that the image carries, as make build's.
var names = []string{"containerd-shim-cryo-v2", "cryo-runc", "cryo-criu-action"}

// k8sNames are the links to cryo-k8s, as make build's K8S_LINKS.
var k8sNames = []string{"kubectl-cryo"}

func main() {
	bin := flag.String("bin", "bin/cryo", "the cryo binary to ship")
	name := flag.String("name", "localhost/cryo/installer:dev", "the image's name")
	out := flag.String("o", "bin/cryo-installer.tar", "the OCI layout tar to write")
	k8s := flag.String("k8s", "", "the cryo-k8s binary to ship at /usr/local/bin/cryo-k8s, which the chart's controller and agent run (none: an image for the installer alone)")
	criu := flag.String("criu", "", "a CRIU to ship at /usr/local/sbin/criu, which the installer copies onto the node (it must run with the node's libraries)")
	flag.Parse()
	if err := build(*bin, *k8s, *criu, *name, *out); err != nil {
		fmt.Fprintf(os.Stderr, "installer image: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("built %s into %s\n", *name, *out)
}

func build(bin, k8s, criu, name, out string) error {
	files, err := contents(bin, k8s, criu)
	if err != nil {
		return err
	}
	layer, err := layerOf(files)
	if err != nil {
		return err
	}
	// The config first: appending the layer then records its diff ID.
	base, err := mutate.ConfigFile(mutate.MediaType(empty.Image, types.OCIManifestSchema1), &v1.ConfigFile{
		Architecture: runtime.GOARCH, OS: "linux",
		Config: v1.Config{Entrypoint: []string{"/usr/local/bin/cryo"}, Cmd: []string{"node", "install", "--wait"},
			Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(base, types.OCIConfigJSON), layer)
	if err != nil {
		return err
	}
	return writeLayout(img, name, out)
}

// file is one entry of the layer: a regular file's bytes or a link.
type file struct {
	data []byte
	mode int64
	link string
}

// contents are the image's files: cryo, its names, and what ldd says it
// loads, each at the path the loader asks for; cryo-k8s and its names,
// and criu, if given.
func contents(bin, k8s, criu string) (map[string]file, error) {
	files := map[string]file{}
	if err := addBinary(files, bin, "usr/local/bin/cryo"); err != nil {
		return nil, err
	}
	for _, n := range names {
		files["usr/local/bin/"+n] = file{link: "cryo"}
	}
	if k8s != "" {
		if err := addBinary(files, k8s, "usr/local/bin/cryo-k8s"); err != nil {
			return nil, err
		}
		for _, n := range k8sNames {
			files["usr/local/bin/"+n] = file{link: "cryo-k8s"}
		}
	}
	if criu != "" {
		data, err := os.ReadFile(criu)
		if err != nil {
			return nil, err
		}
		files["usr/local/sbin/criu"] = file{data: data, mode: 0o755}
	}
	return files, nil
}

// addBinary adds the binary at path as dst, and the libraries it loads.
func addBinary(files map[string]file, path, dst string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	files[dst] = file{data: data, mode: 0o755}
	libs, err := libraries(path)
	if err != nil {
		return err
	}
	for _, l := range libs {
		data, err := os.ReadFile(l) // follows the links: the file itself
		if err != nil {
			return err
		}
		files[l[1:]] = file{data: data, mode: 0o755}
	}
	return nil
}

var lddPath = regexp.MustCompile(`(?m)(?:=>\s*)?(/\S+)\s+\(0x`)

// libraries are the absolute paths ldd lists for bin: none for a static
// binary.
func libraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, out)
	}
	var libs []string
	for _, m := range lddPath.FindAllSubmatch(out, -1) {
		libs = append(libs, string(m[1]))
	}
	return libs, nil
}

// layerOf is a gzipped tar of files, with their parent directories, in
// name order and without times, so that a build is reproducible.
func layerOf(files map[string]file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	for _, p := range paths {
		for _, d := range parents(p) {
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
					return nil, err
				}
			}
		}
		f := files[p]
		if f.link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: f.link, Mode: 0o777}); err != nil {
				return nil, err
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// parents are the directories above p, highest first.
func parents(p string) []string {
	var out []string
	for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

// writeLayout writes img as an OCI layout whose index names it (the
// annotations containerd's and OCI's tools read), and tars the layout.
func writeLayout(img v1.Image, name, out string) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".installer-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	err = p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name,
	}))
	if err != nil {
		return err
	}
	return tarDir(dir, out)
}

// tarDir writes the files of dir into the tar out, through a temporary
// file renamed into place.
func tarDir(dir, out string) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name, hdr.ModTime = rel, hdr.ModTime.Truncate(0)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil || !fi.Mode().IsRegular() {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
