#!/usr/bin/env bash
# The tests start real daemons and workloads (containerd, shims, runc,
# CRIU, Podman, a kubelet, a registry, fake CUDA applications) and must
# leave none behind. `make test` runs:
#   contrib/leftovers.sh before FILE   the processes that exist before
#   contrib/leftovers.sh after FILE    fails, listing them, if any process
#                                      born since is still there
# Processes are told apart by pid and start time (a pid can be reused).
# Kernel threads and this script's own ancestors are not counted.
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

case "${1:-}" in
before)
	list >"$2"
	;;
after)
	# Reaping and daemon exits may lag a moment behind the last test.
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		mapfile -t left < <(list | grep -vxF -f "$2" | cut -d: -f1 | grep -vxF -f <(ancestors; echo "$$"))
		live=()
		for p in "${left[@]}"; do
			[ -d "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && live+=("$p")
		done
		[ "${#live[@]}" -eq 0 ] && exit 0
		sleep 1
	done
	echo "make test: the tests left processes behind (${#live[@]}); each test must stop what it starts:" >&2
	ps -o pid,ppid,etime,args -p "$(IFS=,; echo "${live[*]}")" >&2
	exit 1
	;;
*)
	echo "usage: $0 before|after FILE" >&2
	exit 2
	;;
esac
