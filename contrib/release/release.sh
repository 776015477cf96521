#!/usr/bin/env bash
# release.sh OUTDIR VERSION: cryo's release for linux/amd64, built from bin/
# (make build) and the CRIU that contrib/install-deps.sh builds:
#
#   OUTDIR/cryo-VERSION-linux-amd64.tar.gz   the tree below, under cryo-VERSION-linux-amd64/
#   OUTDIR/cryo_DEBVERSION_amd64.deb          the same files as a Debian package (deb/)
#   OUTDIR/SHA256SUMS                         both, as sha256sum -c reads them
#
# The tree is laid out as it lands under / (docs/release.md describes it):
#   usr/local/bin/cryo (+ containerd-shim-cryo-v2, cryo-runc, cryo-criu-action)
#   usr/local/bin/cryo-k8s (+ kubectl-cryo)   the Kubernetes front ends, apart from cryo
#   usr/local/sbin/criu           cryo's patched CRIU; its RPATH ($ORIGIN/../lib/cryo)
#   usr/local/lib/cryo/           finds the libraries it needs, copied beside it,
#                                 so only glibc (>= 2.34) comes from the host
#   usr/local/share/man, bash-completion, zsh, fish    man pages and completions
#   usr/local/share/cryo/containerd/config-2.toml, config-1.7.toml   drop-ins
#   etc/containers/containers.conf.d/cryo.conf         Podman's drop-in
#   etc/cryo/cryo-runc.env                             cryo-runc's settings
#   install.sh, uninstall.sh, VERSION, FILES           (not installed)
set -euo pipefail

out=${1:?usage: release.sh OUTDIR VERSION}
version=${2:?usage: release.sh OUTDIR VERSION}
here=$(cd "$(dirname "$0")/../.." && pwd)
criu=${CRYO_RELEASE_CRIU:-/usr/local/sbin/criu}
name=cryo-$version-linux-amd64

say() { printf 'release: %s\n' "$*"; }
die() { printf 'release: ERROR: %s\n' "$*" >&2; exit 1; }

[ -x "$here/bin/cryo" ] || die "$here/bin/cryo missing; run make build (make release does)"
[ -x "$here/bin/cryo-k8s" ] || die "$here/bin/cryo-k8s missing; run make build (make release does)"
[ -x "$criu" ] || die "$criu missing; run make deps (contrib/install-deps.sh builds cryo's CRIU)"
command -v patchelf >/dev/null || die "patchelf missing; run make deps (or apt-get install patchelf)"
got=$("$here/bin/cryo" --version | awk 'NR == 1 {print $2}')
[ "$got" = "$version" ] || die "bin/cryo says version $got, not $version; rebuild it with make build VERSION=$version"

mkdir -p "$out"
stage=$(mktemp -d "$out/.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
r=$stage/$name
u=$r/usr/local
mkdir -p "$u"/{bin,sbin,lib/cryo,share/cryo/containerd,share/man/man1} \
	"$u/share/bash-completion/completions" "$u/share/zsh/site-functions" "$u/share/fish/vendor_completions.d" \
	"$r/etc/containers/containers.conf.d" "$r/etc/cryo"

say "cryo $version and its names"
install -m 0755 "$here/bin/cryo" "$u/bin/cryo"
for l in containerd-shim-cryo-v2 cryo-runc cryo-criu-action; do ln -s cryo "$u/bin/$l"; done
# The Kubernetes front ends: a binary of their own, so that cryo, exec'd
# on every checkpoint's path, links no Kubernetes client.
install -m 0755 "$here/bin/cryo-k8s" "$u/bin/cryo-k8s"
ln -s cryo-k8s "$u/bin/kubectl-cryo"

say "man pages and shell completions"
"$u/bin/cryo" gen-docs --man "$u/share/man/man1"
"$u/bin/cryo" completion bash >"$u/share/bash-completion/completions/cryo"
"$u/bin/cryo" completion zsh >"$u/share/zsh/site-functions/_cryo"
"$u/bin/cryo" completion fish >"$u/share/fish/vendor_completions.d/cryo.fish"

say "CRIU $("$criu" --version | sed -n 's/Version: //p') from $criu and its libraries"
install -m 0755 "$criu" "$u/sbin/criu"
# Every library CRIU loads but glibc's own (as contrib/make-dist.sh does).
# DT_RPATH, unlike RUNPATH, also serves the libraries' own dependencies,
# and unlike LD_LIBRARY_PATH it does not reach the programs CRIU runs
# (iptables-restore, ip, the action script), which keep the host's.
ldd "$criu" | awk '/=> \//{print $3}' | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
	while read -r lib; do install -m 0644 "$(readlink -f "$lib")" "$u/lib/cryo/$(basename "$lib")"; done
patchelf --force-rpath --set-rpath '$ORIGIN/../lib/cryo' "$u/sbin/criu"
loads=$(LD_LIBRARY_PATH= ldd "$u/sbin/criu")
case $loads in *"/lib/cryo/libprotobuf-c"*) ;; *) die "the bundled CRIU does not load its own libraries: $loads" ;; esac

say "containerd and Podman drop-ins"
install -m 0644 "$here/contrib/containerd/config-2.toml" "$here/contrib/containerd/config-1.7.toml" "$u/share/cryo/containerd/"
install -m 0644 "$here/contrib/podman/containers.conf" "$r/etc/containers/containers.conf.d/cryo.conf"
install -m 0644 "$here/contrib/podman/cryo-runc.env" "$r/etc/cryo/cryo-runc.env"
install -m 0644 "$here/README.md" "$u/share/cryo/README.md"
install -m 0644 "$here/docs/release.md" "$u/share/cryo/release.md"

# FILES lists what install.sh places, relative to /; VERSION names the release.
(cd "$r" && find usr etc \( -type f -o -type l \) | LC_ALL=C sort) >"$r/FILES"
echo "$version" >"$r/VERSION"
install -m 0755 "$here/contrib/release/install.sh" "$here/contrib/release/uninstall.sh" "$r/"

tarball=$out/$name.tar.gz
say "packing $tarball"
# Reproducible: fixed owner, order and times (the commit's time).
mtime=$(git -C "$here" log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" -cf - "$name" | gzip -n -9 >"$tarball.tmp"
mv -f "$tarball.tmp" "$tarball"

say "building the Debian package"
deb=$(cd "$here/contrib/release/deb" && go run . -root "$r" -version "$version" -out "$out")

(cd "$out" && sha256sum "$(basename "$tarball")" "$(basename "$deb")" >SHA256SUMS)
for f in "$tarball" "$deb" "$out/SHA256SUMS"; do say "wrote $f ($(du -h "$f" | cut -f1))"; done
