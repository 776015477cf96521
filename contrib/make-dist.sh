#!/usr/bin/env bash
# make-dist.sh OUTDIR: build a self-contained bundle for a GPU host that has no
# package registry: cryo (all its names), the GPU acceptance test binary,
# CRIU 4.2.1 with cryo's patches (and the stock build, for benchmark
# baselines) with the shared libraries it needs, runc, containerd 2.x with ctr
# and its runc shim, the CNI plugins of the CRI tests, a static busybox
# for test root filesystems, and a registry server for the image tests.
#
# The result, OUTDIR/cryo-bundle.tar.xz, unpacks into cryo-bundle/ with an
# env.sh to source. Only glibc is taken from the host (the bundle's binaries
# need glibc >= 2.34).
set -euo pipefail

out=${1:?usage: make-dist.sh OUTDIR}
here=$(cd "$(dirname "$0")/.." && pwd)
deps=${CRYO_DEPS:-/opt/cryo-deps}
b="$out/cryo-bundle"

say() { printf 'make-dist: %s\n' "$*"; }
wrap() { # wrap NAME BINARY [VAR=VALUE]: sbin/NAME runs libexec/BINARY with the bundle's libraries
	cat >"$b/sbin/$1" <<WRAP
#!/bin/sh
here=\$(cd "\$(dirname "\$0")/.." && pwd)
${3:+export $3}
LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/libexec/$2" "\$@"
WRAP
	chmod +x "$b/sbin/$1"
}
libs_of() { ldd "$1" | awk '/=> \//{print $3}' | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
	while read -r lib; do cp -L "$lib" "$b/lib/"; done; }
need() { [ -e "$1" ] || { echo "make-dist: ERROR: $1 missing; run \`make deps build\` first" >&2; exit 1; }; }

criu=$(command -v criu || true)
[ -x /usr/local/sbin/criu ] && criu=/usr/local/sbin/criu
need "$here/bin/cryo"; need "$criu"; need /usr/sbin/runc; need "$deps/containerd-2/usr/bin/containerd"; need /bin/busybox

rm -rf "$b" && mkdir -p "$b"/{bin,sbin,lib,libexec} "$b/deps/containerd-2/usr/bin"

say "cryo and its names (not cryo-k8s: no GPU test runs the Kubernetes front ends)"
cp -a "$here"/bin/cryo "$b/bin/"
for l in containerd-shim-cryo-v2 cryo-runc cryo-criu-action; do ln -sf cryo "$b/bin/$l"; done

say "man pages and shell completion"
mkdir -p "$b/share/man/man1" "$b/share/bash-completion/completions" "$b/share/zsh/site-functions" "$b/share/fish/vendor_completions.d"
"$b/bin/cryo" gen-docs --man "$b/share/man/man1"
"$b/bin/cryo" completion bash >"$b/share/bash-completion/completions/cryo"
"$b/bin/cryo" completion zsh >"$b/share/zsh/site-functions/_cryo"
"$b/bin/cryo" completion fish >"$b/share/fish/vendor_completions.d/cryo.fish"

say "cryo with the tests' failpoints (the GPU signal sweep holds it at a step)"
mkdir -p "$b/libexec/failpoints"
(cd "$here" && CRYO_FAILPOINTS_K8S=0 make --no-print-directory failpoints >/dev/null)
cp -a "$here"/bin/failpoints/cryo "$b/libexec/failpoints/"
for l in containerd-shim-cryo-v2 cryo-runc cryo-criu-action; do ln -sf cryo "$b/libexec/failpoints/$l"; done

say "GPU acceptance tests (gpu.test)"
# Without symbols (-s -w): the bundle must travel in 64 MiB with the checkout.
(cd "$here" && CGO_ENABLED=1 go test -c -trimpath -ldflags "-s -w" -o "$b/bin/gpu.test" ./integration/gpu)

say "CRIU $("$criu" --version | sed -n 's/Version: //p') and its libraries"
cp "$criu" "$b/libexec/criu"
# Copy every library CRIU loads except glibc's own, which the host provides.
libs_of "$criu"
# CRIU runs with the libraries it was built against (from the bundle), so that
# the host's own libraries are not disturbed.
wrap criu criu
# The stock build (no cryo patches) for `make bench` baselines (TestBenchCRIU):
# same libraries, about 2 MB compressed.
stock=/usr/local/libexec/cryo/criu-stock
if [ -x "$stock" ]; then
	say "stock CRIU (no cryo patches) for benchmark baselines"
	cp "$stock" "$b/libexec/criu-stock"
	wrap criu-stock criu-stock
fi

# CRIU runs `ip` (addresses, routes) and, where present, iptables-save and
# iptables-restore when it checkpoints a container's own network namespace,
# and `iptables` to lock each established TCP connection it dumps.
# A GPU host may have neither, so the bundle carries them, wrapped like CRIU.
if [ -x /usr/sbin/ip ] && [ -x /usr/sbin/xtables-legacy-multi ]; then
	say "ip and iptables (legacy) for CRIU's network namespaces"
	cp /usr/sbin/ip "$b/libexec/ip" && libs_of /usr/sbin/ip && wrap ip ip
	cp /usr/sbin/xtables-legacy-multi "$b/libexec/" && libs_of /usr/sbin/xtables-legacy-multi
	# The matches and targets (CRIU's network lock uses "mark" and
	# "standard") are plugins, found through XTABLES_LIBDIR.
	cp -r "$(dirname "$(ldd /usr/sbin/xtables-legacy-multi | awk '/libxtables/{print $3}')")/xtables" "$b/lib/xtables"
	# xtables-legacy-multi picks its personality from argv[0]: one link per name.
	for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
		ln -s xtables-legacy-multi "$b/libexec/$n" && wrap "$n" "$n" 'XTABLES_LIBDIR="$here/lib/xtables"'
	done
fi

# The CRI tests' nodes (containerd's CRI plugin) give each pod a network
# with the CNI plugins bridge, host-local and loopback: a GPU host without
# packages has none. They need only glibc: they run no other program.
cni=${CRYO_CNI_BIN_DIR:-/usr/lib/cni}
say "CNI plugins from $cni"
mkdir -p "$b/libexec/cni"
for p in bridge host-local loopback; do need "$cni/$p"; cp "$cni/$p" "$b/libexec/cni/"; done

say "runc $(/usr/sbin/runc --version | sed -n '1s/runc version //p') (+ libseccomp)"
cp /usr/sbin/runc "$b/sbin/runc"
cp -L "$(ldd /usr/sbin/runc | awk '/libseccomp/{print $3}')" "$b/lib/"

say "containerd $("$deps/containerd-2/usr/bin/containerd" --version | awk '{print $3}')"
for f in containerd ctr containerd-shim-runc-v2; do cp "$deps/containerd-2/usr/bin/$f" "$b/deps/containerd-2/usr/bin/"; done
cp /bin/busybox "$b/bin/busybox"
# A registry on loopback for the GPU tests of runnable checkpoint images
# (the kubelet pulls them; the GPU hosts reach no registry).
need /usr/bin/docker-registry
cp /usr/bin/docker-registry "$b/bin/docker-registry"
strip "$b/bin/docker-registry" 2>/dev/null || true

cat >"$b/env.sh" <<'ENV'
# Source this file to use the bundle: . cryo-bundle/env.sh
CRYO_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
export CRYO_BUNDLE
export PATH="$CRYO_BUNDLE/bin:$CRYO_BUNDLE/sbin:$CRYO_BUNDLE/deps/containerd-2/usr/bin:$PATH"
export CRYO_BIN="$CRYO_BUNDLE/bin" CRYO_DEPS="$CRYO_BUNDLE/deps" CRYO_RUNC="$CRYO_BUNDLE/sbin/runc"
export CRYO_CNI_BIN_DIR="$CRYO_BUNDLE/libexec/cni"
export CRYO_FAILPOINT_BIN="$CRYO_BUNDLE/libexec/failpoints"
ENV

say "compressing"
# cryo, its failpoints build and gpu.test share most of their code:
# side by side at the head of the tar and with a 64 MiB window (xz's block
# is three windows, so all three fall in one), xz finds the copies, and the
# three take 18 MB instead of 31 MB. Unpacking needs 64 MiB of memory.
first="cryo-bundle/bin/cryo cryo-bundle/libexec/failpoints/cryo cryo-bundle/bin/gpu.test"
(cd "$out" && { printf '%s\n' $first; find cryo-bundle | grep -vxF -f <(printf '%s\n' $first); }) |
	tar -C "$out" --no-recursion -T - -cf - | xz -T0 --lzma2=preset=6,dict=64MiB >"$out/cryo-bundle.tar.xz"
rm -rf "$b"
say "wrote $out/cryo-bundle.tar.xz ($(du -h "$out/cryo-bundle.tar.xz" | cut -f1))"
