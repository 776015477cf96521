#!/bin/sh
# uninstall.sh [--root DIR]: remove what install.sh placed under DIR
# (default /), as its manifest DIR/var/lib/cryo/install/manifest records: the
# files, the directories it created (when empty), and the files it had moved
# aside, which go back. Running it again does nothing.
set -eu

root=/
while [ $# -gt 0 ]; do
	case $1 in
	--root) root=${2:?--root needs a directory}; shift 2 ;;
	--root=*) root=${1#--root=}; shift ;;
	-h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "uninstall.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
root=${root%/}
state=$root/var/lib/cryo/install
manifest=$state/manifest
say() { printf 'cryo uninstall: %s\n' "$*"; }

[ "$(id -u)" = 0 ] || { echo "cryo uninstall: ERROR: run as root" >&2; exit 1; }
if [ ! -f "$manifest" ]; then
	say "nothing to do: no manifest at $manifest"
	exit 0
fi

version=$(cat "$state/VERSION" 2>/dev/null || true)
list=$(mktemp)
trap 'rm -f "$list"' EXIT
cp "$manifest" "$list"
grep '^f ' "$list" | while read -r _ rel; do
	rm -f "$root/$rel"
	if [ -e "$state/backup/$rel" ] || [ -L "$state/backup/$rel" ]; then
		mv "$state/backup/$rel" "$root/$rel"
		say "put back the $root/$rel that was there before cryo"
	fi
done
n=$(grep -c '^f ' "$list" || true)
rm -rf "$state"
# Deepest first; a directory that holds files of others stays.
grep '^d ' "$list" | cut -c3- | sort -r | while read -r rel; do
	rmdir "$root/$rel" 2>/dev/null || say "kept $root/$rel: it is not empty"
done
say "removed $n files of cryo $version from ${root:-/}"
say "containerd and Podman keep running: restart them yourself to drop cryo's runtime"
