#!/usr/bin/env bash
# build-helm.sh: build helm $HELM_VERSION (helm.sh/helm/v3's cmd/helm) for
# the integration tests of the Helm chart (deploy/helm/cryo), into a cache
# directory that later runs reuse.
#
#   CRYO_HELM_DIR   where the binary goes (default /var/cache/cryo-helm/$HELM_VERSION)
#
# `go install pkg@version` builds it in module mode, outside any module:
# the sources come through the Go module proxy that `go env GOPROXY`
# names; nothing else is downloaded. A lock makes a second caller wait for
# the first one's build. A failed build leaves $CRYO_HELM_DIR/build.failed
# with the end of its log, which the chart's tests quote when they skip.
set -euo pipefail

HELM_VERSION=v3.22.0
DIR=${CRYO_HELM_DIR:-/var/cache/cryo-helm/$HELM_VERSION}

say() { printf 'build-helm: %s\n' "$*"; }
die() { printf 'build-helm: ERROR: %s\n' "$*" >&2; exit 1; }

build() {
	local go start log
	go=$(command -v go || echo /usr/local/go/bin/go)
	[ -x "$go" ] || die "Go is needed to build helm; install Go into /usr/local/go or put it on PATH"
	start=$(date +%s)
	log=$(mktemp)
	say "building helm $HELM_VERSION into $DIR (minutes with cold Go caches)"
	if ! CGO_ENABLED=0 GOBIN="$DIR" nice -n 10 "$go" install -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
		"helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >"$log" 2>&1; then
		tail -20 "$log" | tee "$DIR/build.failed" >&2
		rm -f "$log"
		die "go install of helm $HELM_VERSION failed; check the network and GOPROXY ($("$go" env GOPROXY)); the chart's tests skip"
	fi
	rm -f "$log" "$DIR/build.failed"
	say "built in $(($(date +%s) - start)) s: $("$DIR/helm" version --short)"
}

main() {
	mkdir -p "$DIR"
	exec 9>"$DIR/.lock"
	flock 9
	if [ -x "$DIR/helm" ]; then
		say "helm $HELM_VERSION present in $DIR"
		return 0
	fi
	build
}

main "$@"
