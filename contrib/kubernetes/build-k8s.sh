#!/usr/bin/env bash
# build-k8s.sh: build kubelet, kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl of Kubernetes $K8S_VERSION for the integration
# tests' one-node cluster (TestKubelet, TestK8sDeployment), into a cache
# directory that later runs reuse.
#
#   CRYO_K8S_DIR   where the binaries go (default /var/cache/cryo-k8s/$K8S_VERSION)
#
# The module in k8s-build/ requires k8s.io/kubernetes and replaces each of its
# staging modules (which its own go.mod points at ./staging) by the published
# release of the same version: the Go tool ignores a dependency's replace
# directives. Everything comes through the Go module proxy that the machine's
# `go env GOPROXY` names; nothing else is downloaded.
#
# Time on the 2-core development VM (Go 1.26.8, 2026-11-26, the machine
# shared with other builds and tests at a load of 7 to 14):
#   cold, empty module and build caches (GOMODCACHE, GOCACHE): 17 min (1005 s)
#   cold for Kubernetes, build cache holding cryo's own modules:  19 min (45 s
#     of downloads, 1100 s of compiling)
#   warm (both caches filled, binaries deleted):                  13 s
#   binaries present and of this version: under a second, nothing is built
# kube-controller-manager and kube-scheduler (for TestK8sDeployment: a
# Deployment needs its controllers and a scheduler) share nearly all their
# packages with kube-apiserver; on a cache warm from the other three they
# added 34 s and 9 s (2026-12-02), and the five together rebuilt warm in
# 28 s: the real scheduler costs too little to stand in for it with a
# binder of the test's own.
# So `make test` on a fresh CI machine spends about 20 minutes here once,
# before its 15 minutes of tests: well inside a 90-minute limit, so the
# build runs in line rather than in the background beside the tests,
# which are timing-sensitive on 2 cores. The Go build cache is what makes
# a rebuild warm; keep it between runs.
#
# A stamp file records the version and the sha256 of k8s-build/, so that a
# change to the module rebuilds. A lock makes a second caller wait for the
# first one's build instead of racing it. A failed build leaves
# $CRYO_K8S_DIR/build.failed with the end of its log: TestKubelet then
# skips, quoting it, where it would otherwise fail for want of binaries.
set -euo pipefail

K8S_VERSION=v1.37.2
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$HERE/k8s-build
DIR=${CRYO_K8S_DIR:-/var/cache/cryo-k8s/$K8S_VERSION}
BINS=(kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl)

say() { printf 'build-k8s: %s\n' "$*"; }
die() { printf 'build-k8s: ERROR: %s\n' "$*" >&2; exit 1; }

stamp() { printf '%s %s\n' "$K8S_VERSION" "$(cat "$SRC"/go.mod "$SRC"/go.sum "$SRC"/tools.go | sha256sum | cut -d' ' -f1)"; }

present() {
	local b
	for b in "${BINS[@]}"; do [ -x "$DIR/$b" ] || return 1; done
	[ "$(cat "$DIR/stamp" 2>/dev/null)" = "$(stamp)" ]
}

# ldflags sets the version that the binaries report (kubelet --version, the
# node's kubeletVersion, the API server's /version), as Kubernetes' own
# release build does; without it they report v0.0.0-master.
ldflags() {
	local minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	local v p out="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		for v in "gitVersion=$K8S_VERSION" gitMajor=1 "gitMinor=$minor" gitTreeState=clean; do
			out+=" -X $p.$v"
		done
	done
	printf '%s' "$out"
}

# WORK is the temporary module the build runs in; the exit trap removes it.
WORK=
trap '[ -z "$WORK" ] || rm -rf "$WORK"' EXIT

build() {
	local go work start
	go=$(command -v go || echo /usr/local/go/bin/go)
	[ -x "$go" ] || die "Go is needed to build Kubernetes; install Go into /usr/local/go or put it on PATH"
	WORK=$(mktemp -d)
	work=$WORK
	cp "$SRC"/go.mod "$SRC"/go.sum "$SRC"/tools.go "$work"/
	mkdir -p "$DIR"
	start=$(date +%s)
	say "building ${BINS[*]} $K8S_VERSION into $DIR (about 20 minutes with cold Go caches on 2 cores, seconds when warm)"
	# -mod=mod: the module may add go.sum lines it needs (they go to the
	# temporary copy); one `go build` of the packages shares the work.
	local pkgs=() b
	for b in "${BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
	if ! (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 "$go" build -trimpath -ldflags "$(ldflags)" \
		-o "$work/out/" "${pkgs[@]}") >"$work/build.log" 2>&1; then
		tail -20 "$work/build.log" | tee "$DIR/build.failed" >&2
		die "go build of Kubernetes $K8S_VERSION failed; check the network and GOPROXY ($("$go" env GOPROXY)); the tests that need a kubelet skip"
	fi
	rm -f "$DIR/build.failed"
	for b in "${BINS[@]}"; do install -m 0755 "$work/out/$b" "$DIR/$b"; done
	stamp >"$DIR/stamp"
	say "built in $(($(date +%s) - start)) s: $("$DIR/kubelet" --version)"
}

main() {
	mkdir -p "$DIR"
	exec 9>"$DIR/.lock"
	flock 9
	if present; then
		say "${BINS[*]} $K8S_VERSION present in $DIR"
		return 0
	fi
	build
}

main "$@"
