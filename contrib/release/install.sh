#!/bin/sh
# install.sh [--root DIR]: install this cryo release under DIR (default /):
# the files FILES lists, beside this script, go to the same paths under DIR
# (usr/local/..., etc/...), and one containerd drop-in goes to
# etc/containerd/conf.d/cryo.toml. It touches no package source, restarts
# nothing, and can run again: it replaces what an earlier install placed.
# A file that was there before cryo is moved aside and put back by
# uninstall.sh, which removes exactly what the manifest
# (DIR/var/lib/cryo/install/manifest) records.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=/
while [ $# -gt 0 ]; do
	case $1 in
	--root) root=${2:?--root needs a directory}; shift 2 ;;
	--root=*) root=${1#--root=}; shift ;;
	-h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "install.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
root=${root%/}
state=$root/var/lib/cryo/install
manifest=$state/manifest
say() { printf 'cryo install: %s\n' "$*"; }
die() { printf 'cryo install: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: it writes under $root/usr/local and $root/etc"
[ -f "$here/FILES" ] || die "$here/FILES missing: run install.sh from an unpacked release"

# The glibc of the host: cryo and CRIU are built against 2.34 and later.
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [ -n "$glibc" ] && [ "$root" = "" ]; then
	[ "$(printf '%s\n2.34\n' "$glibc" | sort -V | head -1)" = 2.34 ] || die "glibc $glibc is older than 2.34, which cryo needs (Debian 12 or later)"
fi

# mkdirs DIR records each directory it creates, so that uninstall.sh removes
# those and no others.
mkdirs() {
	d=$1 missing=
	while [ ! -d "$root/$d" ]; do missing="$d $missing"; d=$(dirname "$d"); done
	for d in $missing; do
		mkdir -m 0755 "$root/$d"
		echo "d $d" >>"$new"
	done
	return 0
}

# place SRC REL installs SRC (a file or a link) as DIR/REL, by rename, so
# that a running shim's binary is replaced, not overwritten.
place() {
	src=$1 rel=$2 dst=$root/$2
	mkdirs "$(dirname "$rel")"
	if { [ -e "$dst" ] || [ -L "$dst" ]; } && ! grep -qxF "f $rel" "$old"; then
		mkdir -p "$state/backup/$(dirname "$rel")"
		mv "$dst" "$state/backup/$rel"
		say "moved the existing $dst aside (uninstall.sh puts it back)"
	fi
	rm -f "$dst.cryo-new"
	cp -d --preserve=mode,timestamps "$src" "$dst.cryo-new"
	mv -f "$dst.cryo-new" "$dst"
	echo "f $rel" >>"$new"
}

# The manifest's next version is built apart and replaces it at the end.
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
old=$tmpd/old new=$tmpd/new
if [ -f "$manifest" ]; then cp "$manifest" "$old"; else : >"$old"; fi
: >"$new"
# The directories a previous install created stay recorded.
grep '^d ' "$old" >>"$new" || true
mkdirs var/lib/cryo/install/backup

while read -r rel; do
	place "$here/$rel" "$rel"
done <"$here/FILES"

# containerd: the drop-in of the installed containerd's schema. containerd
# 1.7 replaces a plugin's whole table with an import's (2.x merges them),
# so its drop-in goes in only where config.toml has no CRI table of its own.
ctrd=
for c in "$root/usr/local/bin/containerd" "$root/usr/bin/containerd"; do [ -x "$c" ] && { ctrd=$c; break; }; done
ctrd_version=
[ -n "$ctrd" ] && [ "$root" = "" ] && ctrd_version=$("$ctrd" --version 2>/dev/null | awk '{print $3}' | sed 's/^v//')
conf=$root/etc/containerd/config.toml
dropin=config-2.toml
case $ctrd_version in 1.*) dropin=config-1.7.toml ;; esac
if [ "$dropin" = config-1.7.toml ] && grep -qs 'io.containerd.grpc.v1.cri' "$conf"; then
	say "containerd $ctrd_version: $conf has its own CRI table, which a 1.7 drop-in would replace;"
	say "  merge /usr/local/share/cryo/containerd/config-1.7.toml's table into it instead"
else
	place "$here/usr/local/share/cryo/containerd/$dropin" etc/containerd/conf.d/cryo.toml
fi

# Files of an earlier release that this one no longer has.
grep '^f ' "$old" | while read -r _ rel; do
	grep -qxF "f $rel" "$new" || { rm -f "$root/$rel"; say "removed $root/$rel (not in this release)"; }
done
sort -u "$new" >"$manifest"
cp "$here/uninstall.sh" "$state/uninstall.sh"
cp "$here/VERSION" "$state/VERSION"

say "installed cryo $(cat "$here/VERSION") under ${root:-/} ($(grep -c '^f ' "$manifest") files; manifest $manifest)"
cat <<NEXT
Next:
  cryo doctor                     what this host can checkpoint, and what to fix
  containerd: make sure /etc/containerd/config.toml has
                imports = ["/etc/containerd/conf.d/*.toml"]
              then restart it yourself (systemctl restart containerd) and
              create the RuntimeClass "cryo" (handler: cryo) for Kubernetes
  Podman:     podman --runtime cryo run ...   (/etc/containers/containers.conf.d/cryo.conf)
  uninstall:  $state/uninstall.sh
NEXT
