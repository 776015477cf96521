#!/usr/bin/env bash
# The tests start real daemons and workloads (containerd, shims, runc,
# CRIU, Podman, a kubelet, a registry, fake CUDA applications) and must
# leave none behind. `make test` runs:
#   contrib/leftovers.sh before FILE          the processes that exist before
#   contrib/leftovers.sh after FILE MARKER    fails, listing them, if a process
#                                             of the test run is still there
# The Makefile runs `go test` with CRYO_TEST_RUN=MARKER, a random word:
# every process the tests start inherits it (daemons pass their
# environment on: containerd to its shims, Podman to conmon, cryo to CRIU),
# and a container's processes, which get their spec's environment, have a
# shim or conmon that carries it as an ancestor. A process counts as the
# run's if it is new since `before` (pid and start time: a pid can be
# reused) and it or one of its ancestors carries the marker; processes of
# other shells and users on a shared host are not the run's.
# Kernel threads and this script's own ancestors are not counted. The
# marker is an argument, not exported, so this script's own children do
# not carry it.
set -uo pipefail

list() { # pid:starttime of every user-space process
	ps -e -o pid=,ppid=,lstart= | awk '$2 != 2 && $1 != 2 { p=$1; $1=""; $2=""; gsub(/^ +/, ""); print p ":" $0 }'
}

ancestors() {
	local p=$$
	while [ "$p" -gt 1 ] 2>/dev/null; do
		echo "$p"
		p=$(ps -o ppid= -p "$p" | tr -d ' ')
		[ -n "$p" ] || break
	done
}

ppid() { # the parent of $1, from /proc (the command name may hold spaces)
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	set -- $s
	echo "$2"
}

marked() { # whether $1 or one of its ancestors carries CRYO_TEST_RUN=$marker
	local p=$1 n=0
	while [ "$p" -gt 1 ] 2>/dev/null && [ "$n" -lt 64 ]; do
		grep -qzxF "CRYO_TEST_RUN=$marker" "/proc/$p/environ" 2>/dev/null && return 0
		p=$(ppid "$p") || return 1
		n=$((n + 1))
	done
	return 1
}

case "${1:-}" in
before)
	list >"$2"
	;;
after)
	marker=${3:-}
	if [ -z "$marker" ]; then
		echo "usage: $0 after FILE MARKER (the CRYO_TEST_RUN of the test run)" >&2
		exit 2
	fi
	# Reaping and daemon exits may lag a moment behind the last test.
	for _ in $(seq "${CRYO_LEFTOVERS_WAIT:-10}"); do
		mapfile -t left < <(list | grep -vxF -f "$2" | cut -d: -f1 | grep -vxF -f <(ancestors; echo "$$"))
		live=()
		for p in "${left[@]}"; do
			[ -d "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && marked "$p" && live+=("$p")
		done
		[ "${#live[@]}" -eq 0 ] && exit 0
		sleep 1
	done
	echo "make test: the tests left processes behind (${#live[@]}); each test must stop what it starts:" >&2
	ps -o pid,ppid,etime,args -p "$(IFS=,; echo "${live[*]}")" >&2
	exit 1
	;;
*)
	echo "usage: $0 before FILE | after FILE MARKER" >&2
	exit 2
	;;
esac
