#!/usr/bin/env bash
# chroot-test.sh SUITE TARBALL DEB OUTDIR: check a release on a bare Debian
# SUITE (bookworm, trixie) root file system. It makes a minbase chroot with
# debootstrap (cached as a tarball under /var/cache/cryo-release-chroot, so
# that a second run only unpacks it), then, inside it:
#   1. install.sh from the tarball (twice: it must be idempotent), cryo
#      version, criu --version, ldd of CRIU, cryo doctor --json, and a
#      criu dump and restore of a process;
#   2. uninstall.sh, and a list of the paths that differ from before;
#   3. dpkg -i of the .deb, cryo --version, dpkg --purge, and the list again.
# Each result lands in OUTDIR for TestReleaseChroot (integration/) to judge.
# The chroot's mounts (its root, bound onto itself, /proc and /dev) live in a mount namespace of their own: nothing stays
# mounted when it ends.
set -euo pipefail

suite=${1:?usage: chroot-test.sh SUITE TARBALL DEB OUTDIR}
tarball=${2:?} deb=${3:?} out=${4:?}
cache=${CRYO_CHROOT_CACHE:-/var/cache/cryo-release-chroot}
say() { printf 'chroot-test[%s]: %s\n' "$suite" "$*" >&2; }
die() { printf 'chroot-test[%s]: ERROR: %s\n' "$suite" "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot need it)"
command -v debootstrap >/dev/null || die "debootstrap missing; run make deps"

# mirror: the archive the host's apt uses ($CRYO_DEBIAN_MIRROR wins).
mirror() {
	[ -n "${CRYO_DEBIAN_MIRROR:-}" ] && { echo "$CRYO_DEBIAN_MIRROR"; return; }
	{ grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
	  { grep -hE '^deb\s' /etc/apt/sources.list 2>/dev/null || true; } | sed -E 's/\[[^]]*\]//' | awk '{print $2}'; } |
		grep -v security | head -1 || true
}

mkdir -p "$cache" "$out"
base=$cache/$suite-minbase.tar.zst
if [ ! -s "$base" ]; then
	m=$(mirror) || true
	[ -n "$m" ] || die "no Debian mirror in apt's sources; set CRYO_DEBIAN_MIRROR"
	say "debootstrap --variant=minbase $suite from $m (cached in $base)"
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	debootstrap --variant=minbase "$suite" "$tmp/root" "$m" >"$tmp/log" 2>&1 ||
		{ tail -20 "$tmp/log" >&2; die "debootstrap $suite failed"; }
	tar -C "$tmp/root" --zstd -cf "$base.tmp" .
	mv -f "$base.tmp" "$base"
	rm -rf "$tmp"
	trap - EXIT
fi

work=$(mktemp -d /tmp/cryo-chroot.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir "$root"
tar -C "$root" --zstd -xf "$base"
mkdir -p "$root/tmp/release"
tar -C "$root/tmp/release" -xzf "$tarball"
cp "$deb" "$root/tmp/release/cryo.deb"
rel=/tmp/release/$(basename "$tarball" .tar.gz)

# The commands that run inside the chroot, with /proc of this namespace.
cat >"$root/tmp/steps.sh" <<'STEPS'
set -eu
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C
rel=$1 out=/tmp/out
mkdir -p $out
paths() { find / -xdev \( -path /proc -o -path /tmp -o -path /dev -o -path /sys -o -path /run -o -path /var/log -o -path /var/cache \) -prune -o -print |
	grep -Ev '^/var/lib/dpkg/[a-z]+-old$' | LC_ALL=C sort; }
paths >$out/paths.before
sh $rel/install.sh >$out/install.log 2>&1
sh $rel/install.sh >>$out/install.log 2>&1
cryo version >$out/version.txt 2>&1
# The Kubernetes front ends, a binary of their own: it loads here too.
kubectl-cryo --help >$out/kubectl-cryo.txt 2>&1 || echo "exit $?" >>$out/kubectl-cryo.txt
criu --version >$out/criu-version.txt 2>&1
ldd /usr/local/sbin/criu >$out/ldd.txt 2>&1
cryo doctor --json >$out/doctor.json 2>$out/doctor.err || echo "exit $?" >>$out/doctor.err
# CRIU's real work with the release's libraries: dump a process and
# restore it. The process keeps no descriptor from outside the chroot
# (CRIU finds no mount for those), hence bash closing every fd above 2.
: >/tmp/in
bash -c 'for f in /proc/$$/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-"; done
	exec setsid sleep 1000 </tmp/in >/tmp/sleep.out 2>&1' &
pid=$!
sleep 0.5
mkdir -p /tmp/ck
{ criu dump -t $pid -D /tmp/ck -o dump.log && echo "dumped $(cat /tmp/ck/stats-dump >/dev/null && echo ok)"
  [ -d /proc/$pid ] && echo "still running after dump" || echo "gone after dump"
  criu restore -D /tmp/ck -d -o restore.log && echo "restored $(cat /proc/$pid/comm)"
  kill -9 $pid; } >$out/criu-dump.txt 2>&1 || true
grep -h Error /tmp/ck/dump.log /tmp/ck/restore.log 2>/dev/null | grep -v RLIMIT_NOFILE >>$out/criu-dump.txt || true
sh /var/lib/cryo/install/uninstall.sh >$out/uninstall.log 2>&1
sh $rel/uninstall.sh >>$out/uninstall.log 2>&1
paths >$out/paths.tarball
dpkg -i /tmp/release/cryo.deb >$out/dpkg-install.log 2>&1
cryo --version >$out/deb-version.txt 2>&1
criu --version >>$out/deb-version.txt 2>&1
dpkg --purge cryo >$out/dpkg-purge.log 2>&1
paths >$out/paths.deb
STEPS

say "installing the release in a $suite chroot"
unshare --mount --propagation private bash -c '
	set -e
	# The root a mount of its own, as on a host: CRIU walks the mount tree
	# up to the process'"'"'s root.
	mount --bind "$1" "$1"
	mount -t proc proc "$1/proc"
	# The host'"'"'s device nodes (criu check opens /dev/ptmx and /dev/net/tun).
	mount --rbind /dev "$1/dev"
	chroot "$1" /bin/sh /tmp/steps.sh "$2"
' _ "$root" "$rel" || { cp -r "$root/tmp/out/." "$out/" 2>/dev/null; die "a step failed in the chroot; logs in $out"; }
cp -r "$root/tmp/out/." "$out/"
diff "$out/paths.before" "$out/paths.tarball" >"$out/leftover-tarball.txt" || true
diff "$out/paths.before" "$out/paths.deb" >"$out/leftover-deb.txt" || true
say "done: results in $out"
