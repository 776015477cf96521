#!/usr/bin/env bash
# install-deps.sh: install everything cryo's build, tests and demo need on
# Debian 12 (bookworm) or 13 (trixie). Idempotent: a second run checks each
# part and does nothing. Parts from a newer suite (trixie, sid) come from a
# sources file that exists only while the script runs (add_suites): no apt
# source is left behind.
#
#   Go (go.mod's version)   if none as new is found: trixie's golang-1.24-go
#                  fetches that toolchain through the Go module proxy into
#                  /usr/local/go, linked from /usr/local/bin/go
#   CRIU 4.2.1     built from Debian sid's source (bookworm's 3.17 fails on
#                  kernels >= 6.13 with "Unexpected rt vDSO area bounds", and
#                  4.1 cannot dump TCP or UDP sockets on kernels >= 6.16) with
#                  cryo's patches (contrib/criu/patches) as /usr/local/sbin/criu,
#                  and without them as /usr/local/libexec/cryo/criu-stock; a
#                  machine with an older or unpatched build is rebuilt; its
#                  source tree with the tests of contrib/criu/zdtm-subset.txt
#                  built is kept in $CRYO_DEPS/criu-zdtm (TestCRIUZdtm)
#   runc, iptables, Podman, docker-registry, patchelf (make release),
#                  debootstrap (TestReleaseChroot)   from the host's release
#   CNI plugins    bookworm's containernetworking-plugins (/usr/lib/cni), for
#                  Podman's networks and the CRI tests' pod network
#   containerd 1.7 (trixie) and 2.x (sid)   unpacked side by side under
#                  $CRYO_DEPS (they share one package name, so apt cannot hold both)
#   checkpointctl v1.4.0   `go install`ed into $CRYO_DEPS/bin, for the tests
#                  that read cryo's checkpoint archives with it (the Go found
#                  on PATH, else /usr/local/go/bin/go; a binary of another
#                  version is replaced)
#   bats, and runc's source   the source package of the installed runc from
#                  Debian's archive (bookworm's deb-src, through apt lists of
#                  its own in a temporary directory: the machine's apt sources
#                  are left alone), unpacked with Debian's patches into
#                  $CRYO_DEPS/runc-src, with its recvtty helper built there;
#                  contrib/runc-bats.sh runs its checkpoint.bats with runc
#                  and with cryo-runc
#   containerd's client tests   integration/client of the two containerd
#                  releases above (2.x's from the Go module proxy, 1.7's from
#                  trixie's source package), built with Go into
#                  $CRYO_DEPS/containerd-tests/client-v<version>.test for
#                  TestContainerdCheckpointSuite
#   etcd 3.5 (trixie)      unpacked into $CRYO_DEPS/etcd, and kubelet,
#                  kube-apiserver, kube-controller-manager, kube-scheduler
#                  and kubectl built by kubernetes/build-k8s.sh, for
#                  TestKubelet's one-node cluster; a failed build is
#                  recorded there and the test skips, saying why; not with
#                  CRYO_DEPS_K8S=0 (make demo), which saves the ~450 s build
#
# Environment: CRYO_DEPS (default /opt/cryo-deps) is where the unpacked parts
# go; CRYO_DEPS_K8S=0 skips etcd and Kubernetes; CRYO_DEBIAN_MIRROR names the
# archive for the extra suites (default: the host's own release's).
set -euo pipefail

CRYO_DEPS=${CRYO_DEPS:-/opt/cryo-deps}
CRYO_DEPS_K8S=${CRYO_DEPS_K8S:-1}
CRIU_VERSION=4.2.1
CRIU_SUITE=sid
CHECKPOINTCTL_VERSION=v1.4.0

say() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs Debian packages); try: sudo $0"
command -v apt-get >/dev/null || die "this script needs a Debian system with apt-get"
export DEBIAN_FRONTEND=noninteractive

APT_UPDATED=0
apt_update() {
	[ "$APT_UPDATED" = 1 ] && return 0
	say "updating the package lists"
	apt-get update -qq || die "apt-get update failed; check the network and /etc/apt/sources.list.d"
	APT_UPDATED=1
}

# The Debian release of this host decides which suites the parts come from:
# bookworm takes containerd 1.7 and etcd from trixie, and containerd 2.x and
# CRIU's source from sid; trixie has containerd 1.7 and etcd itself.
CODENAME=$(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-}")
case $CODENAME in
bookworm) EXTRA_SUITES="trixie sid" ;;
trixie) EXTRA_SUITES="sid" ;;
*) die "Debian 12 (bookworm) or 13 (trixie) is needed; this host is ${CODENAME:-unknown} (/etc/os-release)" ;;
esac

# Suites other than the host's are known to apt only while this script runs:
# add_suites writes a sources file and a low pin (so that nothing upgrades
# from them), and the EXIT trap removes both and updates the lists again.
# An earlier install-deps left them for good, under other names: those go too.
TMP_SOURCES=/etc/apt/sources.list.d/cryo-deps-temporary.sources
TMP_PREFS=/etc/apt/preferences.d/cryo-deps-temporary
LEGACY_SOURCES=/etc/apt/sources.list.d/cryo-extra-suites.sources
LEGACY_PREFS=/etc/apt/preferences.d/cryo-extra-suites
SUITES_ADDED=0

# debian_mirror prints the archive this host's own release comes from: the
# first URI of a deb822 stanza or a one-line entry for $CODENAME, or
# $CRYO_DEBIAN_MIRROR.
debian_mirror() {
	if [ -n "${CRYO_DEBIAN_MIRROR:-}" ]; then echo "$CRYO_DEBIAN_MIRROR"; return; fi
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && [ "$f" != "$TMP_SOURCES" ] && [ "$f" != "$LEGACY_SOURCES" ] || continue
		awk -v s="$CODENAME" 'BEGIN { RS = ""; FS = "\n" }
			{ u = ""; ok = 0
			  for (i = 1; i <= NF; i++) {
				if ($i ~ /^URIs:/) { u = $i; sub(/^URIs:[ \t]*/, "", u); split(u, a, " "); u = a[1] }
				if ($i ~ /^Suites:/ && (" " $i " ") ~ (" " s " ")) ok = 1
			  }
			  if (ok && u != "") { print u; exit } }' "$f"
	done
	{ cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
		sed -E 's/\[[^]]*\]//' | awk -v s="$CODENAME" '$1 == "deb" && $3 == s { print $2 }'
}

add_suites() {
	[ "$SUITES_ADDED" = 1 ] && return 0
	local mirror keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	mirror=$(debian_mirror | head -1) || true
	[ -n "$mirror" ] || die "no apt source for $CODENAME to take the Debian mirror from; set CRYO_DEBIAN_MIRROR to one"
	rm -f "$LEGACY_SOURCES" "$LEGACY_PREFS" # this run adds the same suites itself
	say "adding Debian $EXTRA_SUITES (pinned low) from $mirror until this script ends"
	SUITES_ADDED=1
	{
		echo "Types: deb deb-src"
		echo "URIs: $mirror"
		echo "Suites: $EXTRA_SUITES"
		echo "Components: main"
		[ -f "$keyring" ] && echo "Signed-By: $keyring"
	} >"$TMP_SOURCES"
	local s prio=50
	for s in $EXTRA_SUITES; do
		printf 'Package: *\nPin: release n=%s\nPin-Priority: %d\n\n' "$s" "$prio"
		prio=$((prio - 10))
	done >"$TMP_PREFS"
	APT_UPDATED=0
	apt_update
}

# remove_suites (the EXIT trap) takes the extra suites out of apt again,
# and the legacy files once this run no longer needs them.
remove_suites() {
	local rc=$? changed=0
	[ "$SUITES_ADDED" = 1 ] && { rm -f "$TMP_SOURCES" "$TMP_PREFS"; changed=1; }
	if [ -e "$LEGACY_SOURCES" ] || [ -e "$LEGACY_PREFS" ]; then
		rm -f "$LEGACY_SOURCES" "$LEGACY_PREFS"
		say "removed the extra suites an earlier install-deps had left in apt's sources"
		changed=1
	fi
	if [ "$changed" = 1 ]; then
		say "updating the package lists without the extra suites"
		apt-get update -qq || say "WARNING: apt-get update failed; run it again"
	fi
	exit "$rc"
}
trap remove_suites EXIT
# A signal ends the script through exit, so that the EXIT trap runs too.
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# need_suite NAME makes a suite known to apt: the host's own is, any other
# is added (not in a subshell: the trap must know what was added).
need_suite() {
	[ "$1" = "$CODENAME" ] || add_suites
}

apt_install() {
	local missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} = 0 ] && return 0
	apt_update
	say "installing ${missing[*]}"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install ${missing[*]} failed"
}

CRIU_BUILD_DEPS=(build-essential pkgconf libbsd-dev libcap-dev libgnutls28-dev libnet1-dev
	libnftables-dev libnl-3-dev libprotobuf-c-dev libprotobuf-dev protobuf-c-compiler
	protobuf-compiler uuid-dev python3-protobuf libaio-dev dpkg-dev xz-utils)

# cryo's own CRIU patches (contrib/criu/README.md): applied before the build.
# The stamp beside the binary names the version and the patch set's sha256,
# so that a CRIU built without them, or with another set, is rebuilt. The
# unpatched build is kept as CRIU_STOCK, for benchmark baselines.
CRIU_PATCHES=$(cd "$(dirname "$0")" && pwd)/criu/patches
CRIU_STAMP=/usr/local/sbin/criu.cryo-patches
CRIU_STOCK=/usr/local/libexec/cryo/criu-stock

criu_stamp() { printf '%s %s\n' "$CRIU_VERSION" "$(cat "$CRIU_PATCHES"/*.patch | sha256sum | cut -d' ' -f1)"; }

install_criu() {
	if [ -x /usr/local/sbin/criu ] && [ -x "$CRIU_STOCK" ] && [ "$(cat "$CRIU_STAMP" 2>/dev/null)" = "$(criu_stamp)" ]; then
		say "CRIU $CRIU_VERSION with cryo's patches present"
		return 0
	fi
	apt_install "${CRIU_BUILD_DEPS[@]}" patch
	add_suites
	local work
	work=$(mktemp -d)
	say "building CRIU $CRIU_VERSION from Debian $CRIU_SUITE's source in $work"
	(cd "$work" && apt-get source -qq --download-only -t "$CRIU_SUITE" criu >/dev/null 2>&1) || true
	local tarball
	tarball=$(ls "$work"/criu_"$CRIU_VERSION"*.orig.tar.* 2>/dev/null | head -1 || true)
	[ -n "$tarball" ] || die "could not fetch criu $CRIU_VERSION source from $CRIU_SUITE (does the mirror serve deb-src for $CRIU_SUITE?)"
	tar -C "$work" -xf "$tarball"
	local src=$work/criu-$CRIU_VERSION p
	criu_make "$src" "$work/build.log"
	install -D -m 0755 "$src/criu/criu" "$CRIU_STOCK"
	for p in "$CRIU_PATCHES"/*.patch; do
		say "applying $(basename "$p")"
		patch -s -p1 -d "$src" <"$p" || die "$p does not apply to CRIU $CRIU_VERSION"
	done
	criu_make "$src" "$work/build.log"
	install -D -m 0755 "$src/criu/criu" /usr/local/sbin/criu
	criu_stamp >"$CRIU_STAMP"
	rm -rf "$work"
	say "CRIU $CRIU_VERSION with cryo's patches installed as /usr/local/sbin/criu (stock: $CRIU_STOCK)"
}

# criu_make SRC LOG builds criu/criu in SRC (a second call rebuilds only
# what the patches changed).
criu_make() {
	(cd "$1" && make -j"$(nproc)" criu >"$2" 2>&1) ||
		{ tail -30 "$2" >&2; die "CRIU build failed; full log in $2"; }
}

# CRIU's own test suite (test/zdtm.py), for integration's TestCRIUZdtm: a
# source tree of cryo's CRIU (patches/ applied) with the tests of
# contrib/criu/zdtm-subset.txt built, kept in $CRYO_DEPS/criu-zdtm. The test
# runs both installed CRIUs from it (zdtm.py --criu-bin). The stamp names the
# version, the patches and the list: a change of any rebuilds it. A failed
# build is recorded in criu-zdtm.failed and the test skips, saying why.
CRIU_ZDTM_SUBSET=$(cd "$(dirname "$0")" && pwd)/criu/zdtm-subset.txt
CRIU_ZDTM_ROOT=$(cd "$(dirname "$0")" && pwd)/criu/zdtm-root-tests.patch

install_criu_zdtm() {
	local dir=$CRYO_DEPS/criu-zdtm stamp work tarball src tests
	stamp="$(criu_stamp) $(cat "$CRIU_ZDTM_SUBSET" "$CRIU_ZDTM_ROOT" | sha256sum | cut -d' ' -f1)"
	if [ "$(cat "$dir/cryo-zdtm.stamp" 2>/dev/null)" = "$stamp" ]; then
		say "CRIU's test suite present in $dir"
		return 0
	fi
	apt_install "${CRIU_BUILD_DEPS[@]}" patch python3-yaml python3-protobuf
	add_suites
	work=$(mktemp -d)
	(cd "$work" && apt-get source -qq --download-only -t "$CRIU_SUITE" criu >/dev/null 2>&1) || true
	tarball=$(ls "$work"/criu_"$CRIU_VERSION"*.orig.tar.* 2>/dev/null | head -1 || true)
	src=$work/criu-$CRIU_VERSION
	tests=$(sed -n 's|^zdtm/static/\([^ ]*\).*|\1|p' "$CRIU_ZDTM_SUBSET" | sort -u)
	# shellcheck disable=SC2086 # one word a test
	if [ -n "$tarball" ] && tar -C "$work" -xf "$tarball" &&
		cat "$CRIU_PATCHES"/*.patch "$CRIU_ZDTM_ROOT" | patch -s -p1 -d "$src" &&
		(cd "$src" && make -j"$(nproc)" criu lib && make -C test/zdtm/lib &&
			make -j"$(nproc)" -C test/zdtm/static $tests && make -C test zdtm_ct umount2) >"$work/build.log" 2>&1; then
		rm -rf "$dir" "$dir.failed"
		mv "$src" "$dir"
		echo "$stamp" >"$dir/cryo-zdtm.stamp"
		say "CRIU's test suite built in $dir"
	else
		{ echo "building CRIU's test suite failed (contrib/install-deps.sh, install_criu_zdtm):"; tail -20 "$work/build.log" 2>/dev/null || echo "no source of criu $CRIU_VERSION from $CRIU_SUITE"; } >"$dir.failed"
		say "WARNING: CRIU's test suite not built; TestCRIUZdtm will skip (see $dir.failed)"
	fi
	rm -rf "$work"
}

# install_containerd VERSION_PREFIX SUITE DIR unpacks the containerd .deb of a
# suite into DIR (bin/containerd, bin/ctr, bin/containerd-shim-runc-v2).
install_containerd() {
	local want=$1 suite=$2 dir=$3
	if [ -x "$dir/usr/bin/containerd" ] && "$dir/usr/bin/containerd" --version | grep -q " $want"; then
		say "containerd ${want}x present in $dir"
		return 0
	fi
	need_suite "$suite"
	apt_update
	local work
	work=$(mktemp -d)
	chmod 755 "$work" # apt's download user must be able to write there
	say "unpacking containerd ${want}x from $suite into $dir"
	(cd "$work" && apt-get download -qq "containerd/$suite" >/dev/null) || die "could not download containerd from $suite"
	rm -rf "$dir" && mkdir -p "$dir"
	dpkg -x "$work"/containerd_*.deb "$dir"
	rm -rf "$work"
	"$dir/usr/bin/containerd" --version | grep -q " $want" || die "containerd in $dir is not version $want"
}

# check_cni makes sure that the CNI plugins of the CRI tests' pod network
# (bridge, host-local, loopback) are where containernetworking-plugins puts
# them, which the tests' containerd configuration names.
check_cni() {
	local p
	for p in bridge host-local loopback; do
		[ -x "/usr/lib/cni/$p" ] ||
			die "CNI plugin /usr/lib/cni/$p missing; try: apt-get install --reinstall containernetworking-plugins"
	done
	say "CNI plugins present in /usr/lib/cni"
}

# install_checkpointctl builds checkpointctl with Go into $CRYO_DEPS/bin. It
# has no Debian package; v1.4.0 is the release that shares go-criu v7 with
# cryo. `go version -m` tells the version of a binary already there.
install_checkpointctl() {
	local bin=$CRYO_DEPS/bin/checkpointctl go
	if [ -x "$bin" ] && go_of "$bin" | grep -q "checkpointctl[[:space:]]*$CHECKPOINTCTL_VERSION"; then
		say "checkpointctl $CHECKPOINTCTL_VERSION present in $CRYO_DEPS/bin"
		return 0
	fi
	go=$(command -v go || true)
	[ -n "$go" ] || go=/usr/local/go/bin/go
	[ -x "$go" ] || die "Go is needed to build checkpointctl and cryo; install Go into /usr/local/go or put it on PATH"
	say "building checkpointctl $CHECKPOINTCTL_VERSION into $CRYO_DEPS/bin with $go"
	mkdir -p "$CRYO_DEPS/bin"
	GOBIN=$CRYO_DEPS/bin "$go" install "github.com/checkpoint-restore/checkpointctl@$CHECKPOINTCTL_VERSION" ||
		die "go install checkpointctl@$CHECKPOINTCTL_VERSION failed; check the network and GOPROXY"
}

# apt_source SUITE PKG=VERSION DIR downloads a source package into DIR
# from SUITE's deb-src, through apt lists of its own under DIR: nothing of
# the machine's apt configuration changes, and nothing is left to remove.
# The mirror is the machine's bookworm one. Its status is apt-get's, but
# an .orig tarball may arrive where the .dsc does not: callers check files.
apt_source() {
	local suite=$1 spec=$2 dir=$3 opts
	chmod 755 "$dir" # apt's download user must be able to write there
	mkdir -p "$dir/lists/partial"
	awk 'BEGIN{RS="";ORS="\n\n"} /Suites:.*bookworm/ && !done {print; done=1}' \
		"$(grep -l '^Suites:.*bookworm' /etc/apt/sources.list.d/*.sources | head -1)" |
		sed -e "s/^Suites:.*/Suites: $suite/" -e 's/^Types:.*/Types: deb-src/' >"$dir/src.sources"
	opts=(-o "Dir::Etc::SourceList=$dir/src.sources" -o Dir::Etc::SourceParts=- -o "Dir::State::Lists=$dir/lists")
	apt-get "${opts[@]}" update -qq || die "apt-get update of $suite's deb-src failed; check the network"
	(cd "$dir" && apt-get "${opts[@]}" source -qq --download-only "$spec" >/dev/null 2>&1) || true
}

# install_runc_src unpacks the Debian source package of the runc installed
# here into $CRYO_DEPS/runc-src, for its integration tests (bats), and builds
# their recvtty helper (the tests' console socket) with Go; the modules it
# needs come from the Go module proxy. The stamp names the package version,
# so an upgraded runc brings its own tests.
install_runc_src() {
	local dir=$CRYO_DEPS/runc-src ver work go
	ver=$(dpkg-query -W -f='${Version}' runc)
	if [ -x "$dir/recvtty" ] && [ "$(cat "$dir/.cryo-version" 2>/dev/null)" = "$ver" ]; then
		say "runc $ver source and recvtty present in $dir"
		return 0
	fi
	apt_install dpkg-dev xz-utils
	go=$(command -v go || true)
	[ -n "$go" ] || go=/usr/local/go/bin/go
	[ -x "$go" ] || die "Go is needed to build runc's recvtty; install Go into /usr/local/go or put it on PATH"
	work=$(mktemp -d)
	say "fetching runc $ver's source from bookworm into $work"
	apt_source bookworm "runc=$ver" "$work"
	ls "$work"/runc_*.dsc >/dev/null 2>&1 || die "could not fetch runc $ver's source package from bookworm"
	rm -rf "$dir"
	dpkg-source -x "$work"/runc_*.dsc "$dir" >/dev/null 2>&1 || die "dpkg-source -x of runc $ver failed"
	(cd "$dir" && GOFLAGS=-mod=mod GOTOOLCHAIN=local "$go" build -o "$dir/recvtty" ./contrib/cmd/recvtty) ||
		die "building runc's recvtty failed; check the network and GOPROXY"
	printf '%s\n' "$ver" >"$dir/.cryo-version"
	rm -rf "$work"
	say "runc $ver source unpacked into $dir (tests/integration, recvtty)"
}

# install_containerd_tests builds containerd's own client integration tests
# (integration/client) of the two releases unpacked under $CRYO_DEPS into
# test binaries, $CRYO_DEPS/containerd-tests/client-v<version>.test, for
# TestContainerdCheckpointSuite: 2.x's from the Go module proxy (the
# package is part of the containerd/v2 module), 1.7's from Debian trixie's
# source package (there it is a module of its own, which the proxy does not
# serve), each with that release's go.mod.
install_containerd_tests() {
	local go ver work dir
	go=$(command -v go || true)
	[ -n "$go" ] || go=/usr/local/go/bin/go
	[ -x "$go" ] || die "Go is needed to build containerd's client tests; install Go into /usr/local/go or put it on PATH"
	mkdir -p "$CRYO_DEPS/containerd-tests"
	ver=$(containerd_version "$CRYO_DEPS/containerd-2")
	if ! client_tests_present "$ver"; then
		work=$(mktemp -d)
		dir=$(cd "$work" && GOFLAGS=-mod=mod "$go" mod download -json "github.com/containerd/containerd/v2@v$ver" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$dir/integration/client" ] || die "go mod download github.com/containerd/containerd/v2@v$ver failed; check the network and GOPROXY"
		cp -r "$dir" "$work/src" && chmod -R u+w "$work/src"
		client_tests_build "$go" "$ver" "$work/src" "$work/src/integration/client"
		rm -rf "$work"
	fi
	ver=$(containerd_version "$CRYO_DEPS/containerd-1.7")
	if ! client_tests_present "$ver"; then
		work=$(mktemp -d)
		say "fetching containerd $ver's source from trixie into $work"
		apt_source trixie "containerd=$("$CRYO_DEPS/containerd-1.7/usr/bin/containerd" --version | awk '{print $4}')" "$work"
		ls "$work"/containerd_"$ver"*.orig.tar.* >/dev/null 2>&1 || die "could not fetch containerd $ver's source from trixie"
		tar -C "$work" -xf "$(ls "$work"/containerd_"$ver"*.orig.tar.* | head -1)"
		dir=$(ls -d "$work"/containerd-"$ver"*/ | head -1)
		client_tests_build "$go" "$ver" "$dir" "$dir/integration/client"
		rm -rf "$work"
	fi
}

# containerd_version DIR prints the x.y.z of the containerd unpacked in DIR.
containerd_version() {
	local v
	v=$("$1/usr/bin/containerd" --version | awk '{print $3}' | sed -n 's/^v\{0,1\}\([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p')
	[ -n "$v" ] || die "no version in $1/usr/bin/containerd --version"
	printf '%s\n' "$v"
}

client_tests_present() {
	[ -x "$CRYO_DEPS/containerd-tests/client-v$1.test" ] || return 1
	say "containerd v$1's client tests present in $CRYO_DEPS/containerd-tests"
}

# client_tests_build GO VERSION SRC PKGDIR builds the test binary of PKGDIR
# (integration/client) in the source tree SRC. One line of the tests
# changes: the default of their -image-list flag comes from
# $CONTAINERD_TEST_IMAGE_LIST, because their busybox reference is computed
# at package init, before flags are parsed, so the flag never reaches it;
# the tests then pull busybox from a registry on loopback, not the internet.
client_tests_build() {
	local go=$1 ver=$2 src=$3 pkg=$4 list=$3/integration/images/image_list.go
	local bin=$CRYO_DEPS/containerd-tests/client-v$ver.test
	say "building containerd v$ver's client tests into $bin"
	sed -i 's|^var imageListFile = flag.String("image-list", "",|var imageListFile = flag.String("image-list", os.Getenv("CONTAINERD_TEST_IMAGE_LIST"),|' "$list"
	grep -q CONTAINERD_TEST_IMAGE_LIST "$list" || die "containerd v$ver's $list has no -image-list flag to default"
	(cd "$pkg" && GOFLAGS=-mod=mod GOTOOLCHAIN=local "$go" test -c -o "$bin.tmp" .) ||
		die "building containerd v$ver's client tests failed; check the network and GOPROXY"
	mv -f "$bin.tmp" "$bin"
}

# install_etcd unpacks trixie's etcd-server (3.5) into $CRYO_DEPS/etcd for
# TestKubelet's API server. bookworm's 3.4 also served kube-apiserver 1.37
# in a trial, but 3.4 is past its support; and unpacking, not installing,
# keeps the package's own etcd service off the host.
install_etcd() {
	local dir=$CRYO_DEPS/etcd work
	if [ -x "$dir/usr/bin/etcd" ] && "$dir/usr/bin/etcd" --version | grep -q 'etcd Version: 3\.5\.'; then
		say "etcd 3.5 present in $dir"
		return 0
	fi
	local suite=trixie
	need_suite "$suite"
	apt_update
	work=$(mktemp -d)
	chmod 755 "$work" # apt's download user must be able to write there
	(cd "$work" && apt-get download -qq "etcd-server/$suite" >/dev/null) || die "could not download etcd-server from $suite"
	rm -rf "$dir" && mkdir -p "$dir"
	dpkg -x "$work"/etcd-server_*.deb "$dir"
	rm -rf "$work"
	say "etcd $("$dir/usr/bin/etcd" --version | sed -n 's/etcd Version: //p') unpacked into $dir"
}

# go_of prints the module lines of a Go binary (empty if Go is missing).
go_of() {
	local go
	go=$(command -v go || echo /usr/local/go/bin/go)
	[ -x "$go" ] && "$go" version -m "$1" 2>/dev/null | awk '$1 == "mod" {print $2, $3}'
}

# install_go makes sure a Go as new as go.mod's "go" line is on PATH: a fresh
# Debian has none (bookworm's golang is 1.19, too old for cryo and too old
# to fetch a newer toolchain itself). It installs trixie's golang-1.24-go,
# lets that Go fetch the toolchain go.mod names (a module, GOTOOLCHAIN)
# through the Go module proxy, copies it to /usr/local/go and
# links /usr/local/bin/go. A Go already new enough is kept.
install_go() {
	local want go have boot=/usr/lib/go-1.24/bin/go work
	want=$(awk '$1 == "go" { print $2; exit }' "$(dirname "$0")/../go.mod")
	go=$(command -v go || echo /usr/local/go/bin/go)
	if [ -x "$go" ]; then
		have=$("$go" env GOVERSION 2>/dev/null | sed 's/^go//')
		if [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" = "$want" ]; then
			say "Go $have present ($go)"
			return 0
		fi
	fi
	if [ ! -x "$boot" ]; then
		need_suite trixie
		apt_update
		say "installing golang-1.24-go from trixie to fetch Go $want"
		apt-get install -y -qq --no-install-recommends -t trixie golang-1.24-go >/dev/null ||
			die "apt-get install golang-1.24-go from trixie failed"
	fi
	work=$(mktemp -d)
	say "fetching the Go $want toolchain through the Go module proxy into /usr/local/go"
	GOTOOLCHAIN=go$want GOPATH=$work/gopath GOCACHE=$work/cache GOFLAGS=-modcacherw "$boot" version >/dev/null ||
		{ rm -rf "$work"; die "could not fetch Go $want (GOTOOLCHAIN); check the network and GOPROXY"; }
	rm -rf /usr/local/go
	cp -a "$work"/gopath/pkg/mod/*/toolchain@v0.0.1-go"$want".linux-*/. /usr/local/go
	chmod -R u+w "$work" && rm -rf "$work"
	ln -sfn /usr/local/go/bin/go /usr/local/bin/go
	say "Go $(/usr/local/go/bin/go env GOVERSION) installed in /usr/local/go (linked from /usr/local/bin/go)"
}

main() {
	apt_install runc iptables podman conmon slirp4netns fuse-overlayfs containernetworking-plugins \
		docker-registry uidmap zstd ca-certificates git make gcc libc6-dev busybox-static curl jq iproute2 util-linux \
		bash-completion tmux bats gawk patchelf debootstrap
	check_cni
	install_go
	install_criu
	mkdir -p "$CRYO_DEPS"
	install_criu_zdtm
	install_containerd 1.7. trixie "$CRYO_DEPS/containerd-1.7"
	install_containerd 2. sid "$CRYO_DEPS/containerd-2"
	install_checkpointctl
	if [ "$CRYO_DEPS_K8S" = 1 ]; then
		install_runc_src
		install_containerd_tests
		install_etcd
		bash "$(dirname "$0")/kubernetes/build-k8s.sh" || say "WARNING: kubelet not built; TestKubelet will skip (see above)"
		bash "$(dirname "$0")/kubernetes/build-helm.sh" || say "WARNING: helm not built; TestKubeletHelm will skip (see above)"
	else
		say "CRYO_DEPS_K8S=0: no etcd, kubelet or kube-apiserver (TestKubelet skips), no upstream test suites"
	fi
	# The registry package starts a system service on port 5000; the tests run
	# their own on loopback, so keep the system one out of their way.
	if systemctl is-active --quiet docker-registry 2>/dev/null; then systemctl disable --now docker-registry || true; fi
	say "all dependencies present (criu $(/usr/local/sbin/criu --version | sed -n 's/Version: //p'), runc $(runc --version | sed -n '1s/runc version //p'), podman $(podman --version | awk '{print $3}'))"
}

main "$@"
