#!/usr/bin/env bash
# fresh-demo.sh [OUTDIR]: time `make demo` on a fresh Debian machine, cold
# (nothing installed) and warm (the same machine, a second run).
#
# The fresh machine is a debootstrap minbase root of $CRYO_FRESH_SUITE
# (default bookworm), cached as a tarball under /var/cache/cryo-release-chroot
# as chroot-test.sh caches it, unpacked anew for each measurement. In it,
# as a new user would on a new host: apt-get install git make, a clean
# clone of this repository's HEAD, then `make demo` twice. The chroot gets
# the host's /proc, /sys (with its cgroups), /dev and a /run of its own, in
# a mount namespace of its own, so nothing stays mounted when it ends.
# Services the packages would start (docker-registry on port 5000) are kept
# from starting by a policy-rc.d, as in any chroot: they would share the
# host's network. This is a measurement, not a test: it takes minutes.
#
# Results in OUTDIR (default /tmp/cryo-fresh-demo): cold.log, warm.log and
# times.txt (seconds per phase).
set -euo pipefail

suite=${CRYO_FRESH_SUITE:-bookworm}
out=${1:-/tmp/cryo-fresh-demo}
cache=${CRYO_CHROOT_CACHE:-/var/cache/cryo-release-chroot}
repo=$(cd "$(dirname "$0")/../.." && pwd)
say() { printf 'fresh-demo[%s]: %s\n' "$suite" "$*" >&2; }
die() { printf 'fresh-demo[%s]: ERROR: %s\n' "$suite" "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (chroot, mounts and the demo need it)"
base=$cache/$suite-minbase.tar.zst
[ -s "$base" ] || die "$base missing: run contrib/release/chroot-test.sh once (TestReleaseChroot) to make it"
mkdir -p "$out"
rm -f "$out"/cold.log "$out"/warm.log "$out"/times.txt "$out"/commit.txt

work=$(mktemp -d /var/tmp/cryo-fresh.XXXXXX)
root=$work/root
# cleanup ends what still runs in the fresh root (by pid: each process
# of its mount namespace, or whose root is it), then removes it.
cleanup() {
	local p ns
	ns=$(cat "$work/mntns" 2>/dev/null || echo none)
	for p in /proc/[0-9]*; do
		if [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$ns" ] || [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ]; then
			[ "${p#/proc/}" != $$ ] && kill -9 "${p#/proc/}" 2>/dev/null
		fi
	done
	sleep 1
	rm -rf "$work"
}
trap cleanup EXIT
mkdir "$root"
tar -C "$root" --zstd -xf "$base"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# debootstrap's own sources.list names the archive. The archive this
# machine reaches may be a dated snapshot, whose Release files are past
# their Valid-Until: accept them, as the host's apt does.
printf 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n' >"$root/etc/apt/apt.conf.d/99snapshot"
# The certificate authorities this machine's network needs (a TLS proxy's,
# if any) go in as local ones: ca-certificates adds them when it installs.
mkdir -p "$root/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
git clone -q --no-local "$repo" "$root/root/cryo"
git -C "$root/root/cryo" log -1 --format='clone of %h %s' >"$out/commit.txt"

cat >"$root/tmp/steps.sh" <<'STEPS'
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C HOME=/root DEBIAN_FRONTEND=noninteractive
# stamp prefixes each line with the seconds since the phase began.
stamp() { local t0=$1 l; while IFS= read -r l; do printf '[%4ds] %s\n' $(( $(date +%s) - t0 )) "$l"; done; }
phase() {
	local t0=$(date +%s%N) rc ms
	"$@" 2>&1 | stamp "$(date +%s)"
	rc=${PIPESTATUS[0]} ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	echo "$1 $((ms / 1000)).$(printf %03d $((ms % 1000))) s rc=$rc" >>/tmp/times.txt
	return "$rc"
}
first() { apt-get update -qq && apt-get install -y -qq --no-install-recommends git make ca-certificates >/dev/null; }
demo() { cd /root/cryo && make demo; }
: >/tmp/times.txt
phase first >/tmp/cold.log 2>&1 || exit 1
phase demo >>/tmp/cold.log 2>&1 || exit 1
phase demo >/tmp/warm.log 2>&1 || exit 1
STEPS

say "fresh $suite root in $root; make demo cold, then warm"
t0=$(date +%s)
rc=0
# pivot_root, not chroot: CRIU refuses to dump a task whose root is not
# its mount namespace's root ("The root task has another root than
# mntns"), which a chroot makes of every container started in it. After
# the pivot the fresh root is the namespace's root, as on a machine.
unshare --mount --propagation private bash -c '
	set -e
	readlink /proc/self/ns/mnt >"$2"
	mount --bind "$1" "$1"
	mount -t proc proc "$1/proc"
	mount --rbind /sys "$1/sys"
	mount --rbind /dev "$1/dev"
	mount -t tmpfs -o mode=755 tmpfs "$1/run"
	mkdir -p "$1/.oldroot"
	cd "$1"
	pivot_root . .oldroot
	exec /usr/sbin/chroot . /bin/bash -c "umount -l /.oldroot && rmdir /.oldroot && exec /bin/bash /tmp/steps.sh"
' _ "$root" "$work/mntns" || rc=$?
cp "$root"/tmp/cold.log "$root"/tmp/warm.log "$root"/tmp/times.txt "$out/" 2>/dev/null || true
say "exit $rc after $(($(date +%s) - t0)) s; phase times (s):"
cat "$out/times.txt" >&2 || true
[ "$rc" = 0 ] || { tail -n 30 "$out"/cold.log "$out"/warm.log >&2 || true; die "a step failed; logs in $out"; }
