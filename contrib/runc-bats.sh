#!/usr/bin/env bash
# runc-bats.sh: runc's own checkpoint acceptance suite
# (tests/integration/checkpoint.bats of the runc source that install-deps.sh
# unpacked, the version of the runc installed here) run twice: with the real
# runc as RUNC, then with RUNC a wrapper that execs cryo-runc over the same
# runc. It fails when a test passes with runc and fails with cryo-runc, and
# prints both result lists.
#
#   contrib/runc-bats.sh [BATS_FILE]   (default checkpoint.bats)
#
# Environment: CRYO_BIN (default <repo>/bin) holds cryo-runc and fake/ (the
# fake GPU driver: no GPU here); CRYO_DEPS (default /opt/cryo-deps) holds
# runc-src/ and runc-src/recvtty; RUNC_BATS_KEEP=1 keeps the work directory.
#
# runc's helpers download busybox and Debian rootfs tarballs; the suite runs
# offline instead on a busybox rootfs built here from Debian's busybox-static,
# in the layout of the docker-library image the helpers expect (a tarball
# whose ./dev/* they exclude). checkpoint.bats never uses the Debian image,
# so it is an empty tarball that only satisfies get-images.sh.
#
# The suite writes /etc/criu/default.conf ("container specific CRIU config"),
# which every CRIU on the machine would read, and names network namespaces
# in /run/netns, which a failed test leaves behind; it runs in a mount
# namespace of its own with a tmpfs on each.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
BIN=${CRYO_BIN:-$here/../bin}
BIN=$(cd "$BIN" && pwd)
CRYO_DEPS=${CRYO_DEPS:-/opt/cryo-deps}
SRC=$CRYO_DEPS/runc-src
SUITE=${1:-checkpoint.bats}
# FILTER (bats -f) picks tests by name; TEST_TIMEOUT bounds each test, since
# one that fails while a container holds its pipes blocks in `cat` forever.
FILTER=${RUNC_BATS_FILTER:-}
TEST_TIMEOUT=${RUNC_BATS_TEST_TIMEOUT:-45}
# SKIP (a regex of test names) is left out of both passes. "--lazy-pages"
# fails with runc on this machine (CRIU's page server: "Remote side closed
# connection"), and its failure leaves `runc checkpoint --lazy-pages`
# running in the background with bats's output open, so bats never ends.
SKIP=${RUNC_BATS_SKIP-lazy-pages}
REAL_RUNC=$(command -v runc || true)

say() { printf 'runc-bats: %s\n' "$*"; }
die() { printf 'runc-bats: ERROR: %s\n' "$*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "must run as root (runc's checkpoint tests need root)"
command -v bats >/dev/null || die "bats missing: run make deps"
[ -f "$SRC/tests/integration/$SUITE" ] || die "$SRC/tests/integration/$SUITE missing: run make deps"
[ -x "$SRC/recvtty" ] || die "$SRC/recvtty missing: run make deps"
[ -n "$REAL_RUNC" ] || die "runc missing: run make deps"
[ -x "$BIN/cryo-runc" ] || die "$BIN/cryo-runc missing: run make build"
[ -f "$BIN/fake/libcuda.so.1" ] || die "$BIN/fake/libcuda.so.1 missing: run make fake"
[ -x /bin/busybox ] || die "/bin/busybox missing: apt-get install busybox-static"

work=$(mktemp -d /tmp/runc-bats.XXXXXX)
chmod 755 "$work"
# bats's run directories (with each test's runc state and recvtty) go under
# $work, so that cleanup finds what an interrupted test left: its
# containers, deleted with runc, and recvtty, killed by its pid file.
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"
cleanup() {
	local st ct
	for st in "$work"/tmp/bats-run-*/runc.*/state; do
		[ -d "$st" ] || continue
		for ct in $("$REAL_RUNC" --root "$st" list -q 2>/dev/null); do
			"$REAL_RUNC" --root "$st" delete -f "$ct" >/dev/null 2>&1 || true
		done
		[ -f "${st%/state}/tty/pid" ] && kill -9 "$(cat "${st%/state}/tty/pid")" 2>/dev/null || true
	done
	[ "${RUNC_BATS_KEEP:-}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# tree lays out what runc's helpers find relative to tests/integration:
# ../../contrib/cmd/recvtty/recvtty, testdata/<image>-<arch>.tar.xz, and
# `go env GOARCH` (get-images.sh asks Go for the architecture).
tree() {
	mkdir -p "$work/runc/tests" "$work/runc/contrib/cmd/recvtty"
	cp -a "$SRC/tests/integration" "$work/runc/tests/"
	ln -s "$SRC/recvtty" "$work/runc/contrib/cmd/recvtty/recvtty"
	local arch=amd64
	[ "$(uname -m)" = x86_64 ] || die "only x86-64 is set up here"
	busybox_rootfs "$work/runc/tests/integration/testdata/busybox-$arch.tar.xz"
	tar -C "$(mktemp -d "$work/empty.XXXX")" -cJf "$work/runc/tests/integration/testdata/debian-$arch.tar.xz" .
	mkdir -p "$work/bin"
	if ! command -v go >/dev/null; then
		printf '#!/bin/sh\n[ "$*" = "env GOARCH" ] && echo %s\n' "$arch" >"$work/bin/go"
		chmod 755 "$work/bin/go"
	fi
}

# busybox_rootfs OUT packs the static busybox with a link per applet in
# /bin, root's passwd and group entries and the usual empty directories, as
# a tarball of ./ entries (helpers.bash extracts it with --exclude './dev/*').
busybox_rootfs() {
	local r=$work/rootfs a
	mkdir -p "$r"/{bin,dev,etc,home,proc,root,sys,tmp,usr/sbin,var/spool/mail,var/www}
	chmod 1777 "$r/tmp"
	cp /bin/busybox "$r/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ "$a" = busybox ] || ln -f "$r/bin/busybox" "$r/bin/$a"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$r/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
	tar -C "$r" --numeric-owner -cJf "$1" .
}

# wrapper writes the RUNC that the second pass uses: cryo-runc with the real
# runc, no environment file of the machine's, and the fake GPU driver.
wrapper() {
	cat >"$work/bin/cryo-runc-bats" <<EOF
#!/bin/sh
export CRYO_RUNC=$REAL_RUNC CRYO_RUNC_ENV=/dev/null
export CRYO_LIBCUDA=$BIN/fake/libcuda.so.1 CRYO_LIBNVML=$BIN/fake/libnvidia-ml.so.1
exec $BIN/cryo-runc "\$@"
EOF
	chmod 755 "$work/bin/cryo-runc-bats"
}

# pass NAME RUNC runs the suite with RUNC, TAP output in $work/NAME.tap.
pass() {
	local name=$1 runc=$2 t0=$SECONDS rc=0
	say "running $SUITE with RUNC=$runc"
	unshare --mount --propagation private -- bash -c '
		set -e
		for d in /etc/criu /run/netns; do mkdir -p "$d" && mount -t tmpfs -o mode=0755 cryo-bats "$d"; done
		cd "$1" && exec env PATH="$2:/usr/local/sbin:$PATH" RUNC="$3" BATS_TEST_TIMEOUT="$5" bats --tap ${6:+-f "$6"} "$4"
	' _ "$work/runc/tests/integration" "$work/bin" "$runc" "$SUITE" "$TEST_TIMEOUT" "$FILTER" >"$work/$name.tap" 2>&1 || rc=$?
	say "$name: bats exited $rc after $((SECONDS - t0)) s"
}

# results NAME prints "ok|not ok|skip|timeout<TAB>name" per test of a TAP file.
results() {
	sed -n -e 's/^ok [0-9]* \(.*\) # skip.*/skip\t\1/p' -e '/# skip/!s/^ok [0-9]* \(.*\)/ok\t\1/p' \
		-e 's/^not ok [0-9]* \(.*\) # timeout.*/timeout\t\1/p' -e '/# timeout/!s/^not ok [0-9]* \(.*\)/not ok\t\1/p' "$work/$1.tap"
}

# names_filter prints a bats -f regex matching exactly the names on stdin.
names_filter() {
	awk '{ gsub(/[][\\.^$*+?(){}|]/, "\\\\&"); printf "%s^%s$", sep, $0; sep = "|" }'
}

tree
wrapper
if [ -z "$FILTER" ] && [ -n "$SKIP" ]; then
	FILTER=$(sed -n 's/^@test "\(.*\)" {$/\1/p' "$work/runc/tests/integration/$SUITE" | grep -Ev -- "$SKIP" | names_filter)
fi
# The mount points of the private tmpfs are made on the host if missing,
# and removed again afterwards.
created=()
for d in /etc/criu /run/netns; do [ -e "$d" ] || created+=("$d"); done
pass runc "$REAL_RUNC"
results runc >"$work/runc.res"
[ -s "$work/runc.res" ] || { cat "$work/runc.tap" >&2; die "no result from the runc pass"; }
# Only what passed with runc can regress: a test that fails with runc here
# is not run again (the lazy-pages one, failing, waits for its timeout).
FILTER=$(awk -F'\t' '$1 == "ok" { print $2 }' "$work/runc.res" | names_filter)
if [ -n "$FILTER" ]; then
	pass cryo "$work/bin/cryo-runc-bats"
	results cryo >"$work/cryo.res"
else
	: >"$work/cryo.res"; : >"$work/cryo.tap"
fi
for d in "${created[@]}"; do rmdir "$d" 2>/dev/null || true; done
awk -F'\t' 'NR==FNR { seen[$2] = 1; next } !seen[$2] { print "not run (" $1 " with runc)\t" $2 }' \
	"$work/cryo.res" "$work/runc.res" >>"$work/cryo.res"
if [ -n "$SKIP" ]; then
	sed -n 's/^@test "\(.*\)" {$/\1/p' "$work/runc/tests/integration/$SUITE" | grep -E -- "$SKIP" |
		sed 's/^/skipped here (RUNC_BATS_SKIP)\t/' | tee -a "$work/runc.res" >>"$work/cryo.res" || true
fi
for n in runc cryo; do
	printf '\n=== %s with RUNC=%s ===\n' "$SUITE" "$n"
	cat "$work/$n.res"
done

# The failures with cryo-runc, with what bats printed for each.
printf '\n=== failures with cryo-runc ===\n'
awk '/^not ok/{p=1; print; next} /^(ok|not ok) /{p=0} p' "$work/cryo.tap"

regressions=$(awk -F'\t' 'NR==FNR { if ($1 == "ok") ok[$2] = 1; next } ok[$2] && $1 != "ok" { print $2 }' \
	"$work/runc.res" "$work/cryo.res")
if [ -n "$regressions" ]; then
	printf '\nrunc-bats: FAIL: passed with runc, not with cryo-runc:\n%s\n' "$regressions" >&2
	exit 1
fi
say "every test that passed with runc passed with cryo-runc"
