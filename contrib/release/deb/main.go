// Command deb packs an unpacked cryo release tree (contrib/release/release.sh)
// into a Debian package with nfpm, as a library: the .deb holds the very
// files of the tarball, at the same paths, and prints its name.
//
// It is a module of its own so that nfpm and its dependencies stay out of
// cryo's module and binary: `go run . -root DIR -version V -out DIR`.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
)

func main() {
	root := flag.String("root", "", "the release tree (holds FILES, usr/, etc/)")
	version := flag.String("version", "", "the release version (git describe --tags)")
	out := flag.String("out", ".", "where the .deb goes")
	flag.Parse()
	name, err := build(*root, *version, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deb:", err)
		os.Exit(1)
	}
	fmt.Println(name)
}

func build(root, version, out string) (string, error) {
	if root == "" || version == "" {
		return "", fmt.Errorf("-root and -version are required")
	}
	contents, err := contentsOf(root)
	if err != nil {
		return "", err
	}
	post, err := writeScript(out, "postinst", postinst)
	if err != nil {
		return "", err
	}
	defer os.Remove(post)
	postrm, err := writeScript(out, "postrm", postrm)
	if err != nil {
		return "", err
	}
	defer os.Remove(postrm)
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "cryo",
		Arch:          "amd64",
		Platform:      "linux",
		Version:       DebVersion(version),
		VersionSchema: "none",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    "cryo maintainers <cryo@cryo-gpu.invalid>",
		Description: "checkpoint and restore GPU containers\n" +
			"cryo checkpoints and restores containers whose processes use NVIDIA GPUs,\n" +
			"through containerd (containerd-shim-cryo-v2), Podman (cryo-runc) and its CLI.\n" +
			"It carries its own patched CRIU in /usr/local/sbin/criu.",
		Homepage: "https://github.com/cryo-gpu/cryo",
		License:  "Apache-2.0",
		MTime:    time.Unix(0, 0).UTC(),
		Overridables: nfpm.Overridables{
			// cryo and CRIU need only glibc; runc runs the containers.
			Depends:    []string{"libc6 (>= 2.34)"},
			Recommends: []string{"runc"},
			Contents:   contents,
			Scripts:    nfpm.Scripts{PostInstall: post, PostRemove: postrm},
		},
	})
	pkg, err := nfpm.Get("deb")
	if err != nil {
		return "", err
	}
	path := filepath.Join(out, pkg.ConventionalFileName(info))
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return "", err
	}
	if err := pkg.Package(info, f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("pack %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(path+".tmp", path)
}

// contentsOf lists the files that FILES names: the ones under etc/ are
// conffiles, which dpkg keeps when the admin edited them.
func contentsOf(root string) (files.Contents, error) {
	list, err := os.ReadFile(filepath.Join(root, "FILES"))
	if err != nil {
		return nil, fmt.Errorf("read the release's file list: %w", err)
	}
	var cs files.Contents
	for _, rel := range strings.Fields(string(list)) {
		src := filepath.Join(root, rel)
		st, err := os.Lstat(src)
		if err != nil {
			return nil, err
		}
		c := &files.Content{Source: src, Destination: "/" + rel, FileInfo: &files.ContentFileInfo{Mode: st.Mode().Perm()}}
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return nil, err
			}
			c.Source, c.Type = target, files.TypeSymlink
		case strings.HasPrefix(rel, "etc/"):
			c.Type = files.TypeConfig
		}
		cs = append(cs, c)
	}
	return cs, nil
}

var describe = regexp.MustCompile(`^(.+)-([0-9]+)-g([0-9a-f]+)$`)

// DebVersion turns `git describe --tags` into a Debian version that sorts
// as the commits do: v0.3.0 is 0.3.0, v0.3.0-rc1 0.3.0~rc1 (before 0.3.0),
// v0.3.0-5-gabc123 0.3.0+git5.gabc123 (after), -dirty +dirty; a bare commit
// (no tag) is 0.0.0~git.<commit>.
func DebVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	dirty := strings.HasSuffix(v, "-dirty")
	v = strings.TrimSuffix(v, "-dirty")
	extra := ""
	if m := describe.FindStringSubmatch(v); m != nil {
		v, extra = m[1], "+git"+m[2]+".g"+m[3]
	}
	if v == "" || v[0] < '0' || v[0] > '9' || !strings.Contains(v, ".") {
		v, extra = "0.0.0~git."+v, ""
	}
	v = strings.ReplaceAll(v, "-", "~") + extra
	if dirty {
		if strings.Contains(v, "+") {
			return v + ".dirty"
		}
		return v + "+dirty"
	}
	return v
}

func writeScript(dir, name, body string) (string, error) {
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.WriteString(body)
	return f.Name(), err
}

// postinst changes nothing on the host: no service restarts, no edits of
// containerd's or Podman's configuration; it says what is left to do.
const postinst = `#!/bin/sh
set -e
[ "$1" = configure ] || exit 0
dropin=config-2.toml
if command -v containerd >/dev/null 2>&1; then
	case $(containerd --version 2>/dev/null | awk '{print $3}') in v1.*|1.*) dropin=config-1.7.toml ;; esac
fi
cat <<NEXT
cryo is installed (/usr/local/bin/cryo, CRIU in /usr/local/sbin/criu). Nothing was restarted.
Next:
  cryo doctor
  containerd: cp /usr/local/share/cryo/containerd/$dropin /etc/containerd/conf.d/cryo.toml
              with imports = ["/etc/containerd/conf.d/*.toml"] in /etc/containerd/config.toml
              (containerd 1.7 replaces the whole CRI table with an import's: merge by hand
              where config.toml has its own), then: systemctl restart containerd
  Podman:     podman --runtime cryo run ...  (/etc/containers/containers.conf.d/cryo.conf)
NEXT
`

// postrm puts back the /usr/local directories that base-files creates and
// no package lists: dpkg removes every directory of a package that is
// empty once its files are gone, /usr/local/bin among them.
const postrm = `#!/bin/sh
set -e
case $1 in
remove|purge)
	for d in /usr/local/bin /usr/local/sbin /usr/local/lib /usr/local/share /usr/local/share/man; do
		[ -d "$d" ] || mkdir -m 0755 "$d"
	done ;;
esac
`
