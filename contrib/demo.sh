#!/usr/bin/env bash
# cryo demo: checkpoint a running container through containerd and restore
# it as a new container whose counter carries on.
#
# It starts a private containerd 2.x (own root, state and socket under a
# temporary directory) with cryo's runtime io.containerd.cryo.v2, builds a
# small image locally (busybox, packed as an OCI archive with tar and
# sha256sum), runs a counter, `ctr task checkpoint`s it, builds the checkpoint
# into a cryo image (`cryo image build --containerd`), restores that as a new
# container (`cryo image restore --containerd`), and cleans everything up.
# `make demo` runs it after `make deps build`; it needs root.
#
# CRYO_DEMO_EXIT=1 stops the original at the checkpoint (a migration)
# instead of leaving it running next to its restored copy (a clone).
#
# With a GPU (nvidia-smi works or /dev/nvidia0 exists) the counter is
# contrib/workloads/cudamem/cudamem, a CUDA program that keeps its counter
# and a memory pattern on the GPU. Without one it is fakecuda-app on cryo's
# fake CUDA driver (bin/fake, `make fake`): the same driver calls and
# checkpoint states, no GPU; the demo says so. Without bin/fake it is a
# shell loop, and no CUDA at all.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
DEPS=${CRYO_DEPS:-/opt/cryo-deps}
CTRD_BIN=$DEPS/containerd-2/usr/bin
NVLIB=${CRYO_NVIDIA_LIB:-/usr/local/nvidia/lib64}
CUDAMEM=${CRYO_CUDAMEM:-$REPO/contrib/workloads/cudamem/cudamem}
CRYO=${CRYO_BIN:-$REPO/bin}/cryo
FAKE=${CRYO_FAKE_DIR:-$REPO/bin/fake}
NS=cryo-demo
IMAGE=localhost/cryo/demo:latest
CKPT_IMAGE=localhost/cryo/demo-checkpoint:1

T0=$(date +%s%N)
say()  { local t=$(( ($(date +%s%N) - T0) / 10000000 )); printf '[%3d.%02ds] %s\n' $((t / 100)) $((t % 100)) "$*"; }
die()  { echo "demo: $*" >&2; exit 1; }
ms()   { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

need() {
	[ "$(id -u)" = 0 ] || die "run as root (sudo make demo): containerd, runc and CRIU need it"
	[ -x "$CTRD_BIN/containerd" ] || die "containerd 2.x not found in $CTRD_BIN: run make deps"
	[ -x "$CRYO" ] || die "$CRYO not found: run make build"
	for tool in runc criu busybox sha256sum tar; do
		command -v "$tool" >/dev/null || die "$tool not found: run make deps"
	done
}

gpu_present() { nvidia-smi >/dev/null 2>&1 || [ -e /dev/nvidia0 ]; }

setup_dirs() {
	WORK=$(mktemp -d /tmp/cryo-demo.XXXXXX)
	SOCK=$WORK/containerd.sock
	mkdir -p "$WORK/bin" "$WORK/logs"
	ln -s "$CRYO" "$WORK/bin/containerd-shim-cryo-v2"
	export PATH=$WORK/bin:$CTRD_BIN:/usr/local/sbin:$PATH
	trap cleanup EXIT
}

ctr() { "$CTRD_BIN/ctr" --address "$SOCK" --namespace "$NS" "$@"; }

# cryo runs the CLI on the private containerd, with an image store and
# restore work directories of the demo's own.
cryo() {
	local sub=$1 verb=$2; shift 2
	env CRYO_RESTORE_DIR="$WORK/restore" "${DRIVER_ENV[@]}" "$CRYO" "$sub" "$verb" --store "$WORK/store" \
		--address "$SOCK" --namespace "$NS" "$@"
}

start_containerd() {
	cat >"$WORK/config.toml" <<TOML
version = 3
root = "$WORK/root"
state = "$WORK/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.podsandbox.controller.v1.podsandbox", "io.containerd.sandbox.controller.v1.shim"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = "$WORK/debug.sock"
TOML
	env "${DRIVER_ENV[@]}" containerd --config "$WORK/config.toml" >"$WORK/containerd.log" 2>&1 &
	CTRD_PID=$!
	for _ in $(seq 100); do [ -S "$SOCK" ] && return; sleep 0.1; done
	die "containerd did not start; see $WORK/containerd.log"
}

# build_image packs a busybox root filesystem as an OCI image archive.
build_image() {
	local root=$WORK/image/rootfs lay=$WORK/image/layout
	mkdir -p "$root"/{bin,tmp,proc,sys,dev,etc} "$lay/blobs/sha256"
	cp "$(command -v busybox)" "$root/bin/busybox"
	for a in sh sleep echo cat; do ln -s busybox "$root/bin/$a"; done
	echo 'root:x:0:0:root:/:/bin/sh' >"$root/etc/passwd"
	[ "$MODE" = gpu ] && add_cuda "$root"
	[ "$MODE" = fake ] && add_fake "$root"
	tar -C "$root" --owner=0 --group=0 --numeric-owner -cf "$WORK/image/layer.tar" .
	local layer; layer=$(blob "$WORK/image/layer.tar")
	printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$layer" >"$WORK/image/config.json"
	local config; config=$(blob "$WORK/image/config.json")
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%d}]}' \
		"$config" "$(size "$WORK/image/config.json")" "$layer" "$(size "$WORK/image/layer.tar")" >"$WORK/image/manifest.json"
	local manifest; manifest=$(blob "$WORK/image/manifest.json")
	printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s"}}]}' \
		"$manifest" "$(size "$WORK/image/manifest.json")" "$IMAGE" >"$lay/index.json"
	echo '{"imageLayoutVersion":"1.0.0"}' >"$lay/oci-layout"
	tar -C "$lay" -cf "$WORK/image/image.tar" .
	ctr images import "$WORK/image/image.tar" >/dev/null
}

# add_cuda copies the CUDA workload, the libraries it links and the driver's
# user-space libraries into the image, so the container needs no host mounts.
add_cuda() {
	local root=$1 lib
	cp "$CUDAMEM" "$root/bin/cudamem"
	# The workload's libraries, and libcuda's (libm, librt, …).
	for lib in $(ldd "$CUDAMEM" "$NVLIB/libcuda.so.1" | awk '/\//{for(i=1;i<=NF;i++) if ($i ~ /^\// && $i !~ /:$/) print $i}' | sort -u); do
		mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"
	done
	mkdir -p "$root/usr/lib"
	cp -L "$NVLIB/libcuda.so.1" "$NVLIB/libnvidia-ptxjitcompiler.so.1" "$root/usr/lib/"
}

# add_fake copies fakecuda-app, the libraries it links and the fake
# libcuda into the image.
add_fake() {
	local root=$1 lib
	cp "$FAKE/fakecuda-app" "$root/bin/fakecuda-app"
	for lib in $(ldd "$FAKE/fakecuda-app" | awk '/\//{for(i=1;i<=NF;i++) if ($i ~ /^\//) print $i}' | sort -u); do
		mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"
	done
	mkdir -p "$root/usr/lib"
	cp "$FAKE/libcuda.so.1" "$root/usr/lib/"
}

# blob copies a file into the layout's blobs and prints its sha256.
blob() {
	local sum; sum=$(sha256sum "$1" | cut -d' ' -f1)
	cp "$1" "$WORK/image/layout/blobs/sha256/$sum"
	echo "$sum"
}
size() { stat -c %s "$1"; }

# private_net: the container gets a network namespace of its own, which CRIU
# checkpoints with iptables; CRYO_DEMO_NET=host shares the host's instead.
private_net() { [ "${CRYO_DEMO_NET:-}" != host ] && command -v iptables-restore >/dev/null; }

# run_counter starts the counter container with cryo's runtime.
run_counter() {
	local args=(--runtime io.containerd.cryo.v2 --log-uri "file://$WORK/logs/demo.log")
	if [ "$MODE" = gpu ]; then
		for dev in /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do args+=(--device "$dev"); done
		args+=(--env "LD_LIBRARY_PATH=/usr/lib")
		private_net || args+=(--net-host)
		ctr run -d "${args[@]}" "$IMAGE" demo /bin/cudamem 1024 200
	elif [ "$MODE" = fake ]; then
		ctr run -d "${args[@]}" --env LD_LIBRARY_PATH=/usr/lib "$IMAGE" demo /bin/fakecuda-app 200
	else
		ctr run -d "${args[@]}" "$IMAGE" demo /bin/sh -c 'i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.2; done'
	fi
}

last_tick() { grep -o 'tick [0-9]*' "$1" 2>/dev/null | tail -1 | cut -d' ' -f2 || true; }
first_tick() { grep -o 'tick [0-9]*' "$1" 2>/dev/null | head -1 | cut -d' ' -f2 || true; }

wait_ticks() { # file, count
	local n
	for _ in $(seq 300); do
		n=$(grep -c 'tick' "$1" 2>/dev/null) || n=0
		[ "$n" -ge "$2" ] && return
		sleep 0.1
	done
	echo "demo: no ticks in $1. The container printed:" >&2
	tail -5 "$1" >&2 2>/dev/null
	echo "containerd's last lines:" >&2
	tail -15 "$WORK/containerd.log" >&2
	exit 1
}

cleanup() {
	set +e
	for id in demo demo-restored; do
		ctr task kill -s SIGKILL "$id" >/dev/null 2>&1
	done
	sleep 0.5
	for id in demo demo-restored; do
		ctr task delete "$id" >/dev/null 2>&1
		ctr container delete "$id" >/dev/null 2>&1
	done
	[ -n "${CTRD_PID:-}" ] && kill "$CTRD_PID" 2>/dev/null && wait "$CTRD_PID" 2>/dev/null
	grep " $WORK" /proc/self/mounts | cut -d' ' -f2 | sort -r | xargs -r -n1 umount -l 2>/dev/null
	rm -rf "$WORK"
	say "cleaned up"
}

main() {
	need
	MODE=cpu
	DRIVER_ENV=()
	local what="a shell loop counting (no CUDA: build bin/fake with make fake for the fake CUDA app)"
	if gpu_present; then
		[ -x "$CUDAMEM" ] || die "GPU found but $CUDAMEM is missing: build it with make gpu-test (nvcc)"
		MODE=gpu
		what="cudamem, a CUDA program with its counter and memory on the GPU"
		[ -e "$NVLIB/libcuda.so.1" ] && DRIVER_ENV=(CRYO_LIBCUDA="$NVLIB/libcuda.so.1" CRYO_LIBNVML="$NVLIB/libnvidia-ml.so.1")
	elif [ -x "$FAKE/fakecuda-app" ] && [ -e "$FAKE/libcuda.so.1" ]; then
		MODE=fake
		what="fakecuda-app on cryo's FAKE CUDA driver ($FAKE/libcuda.so.1): no GPU here, so no real GPU memory moves"
		DRIVER_ENV=(CRYO_LIBCUDA="$FAKE/libcuda.so.1" CRYO_LIBNVML="$FAKE/libnvidia-ml.so.1")
	fi
	setup_dirs
	say "cryo demo ($MODE workload) in $WORK"
	say "the workload: $what"
	local t; t=$(date +%s%N)
	start_containerd
	say "started a private containerd $("$CTRD_BIN/containerd" --version | cut -d' ' -f3) in $(ms "$t") ms"
	t=$(date +%s%N); build_image
	say "built and imported the image $IMAGE in $(ms "$t") ms"
	run_counter
	wait_ticks "$WORK/logs/demo.log" 5
	say "container demo is counting: $(tail -1 "$WORK/logs/demo.log")"

	local before; before=$(last_tick "$WORK/logs/demo.log")
	t=$(date +%s%N)
	local ref how="demo keeps running"
	if [ -z "${CRYO_DEMO_EXIT:-}" ] && [ "$MODE" = gpu ] && ! private_net; then
		# The container shares the host's network namespace here, and
		# CUDA binds an abstract unix socket, which lives in the network
		# namespace: a copy cannot run next to its original, so the demo
		# migrates.
		say "the container shares the host network, so the demo migrates it (--exit) instead of cloning it"
		CRYO_DEMO_EXIT=1
	fi
	if [ "${CRYO_DEMO_EXIT:-0}" = 1 ]; then
		ref=$(ctr task checkpoint --exit demo | tail -1); how="--exit: demo stopped"
	else
		ref=$(ctr task checkpoint demo | tail -1)
	fi
	say "checkpointed demo at tick $before into image $ref in $(ms "$t") ms (ctr task checkpoint; $how)"
	say "the shim's steps: $(grep -o 'step=[a-z]*' "$WORK/containerd.log" | cut -d= -f2 | tr '\n' ' ')"

	t=$(date +%s%N)
	cryo image build --containerd --tmp "$WORK" "$ref" "$CKPT_IMAGE" >/dev/null 2>"$WORK/build.log" || {
		cat "$WORK/build.log" >&2; die "cryo image build failed"
	}
	say "built $ref into the cryo image $CKPT_IMAGE in $(ms "$t") ms ($(grep -o 'built .*' "$WORK/build.log" | cut -d' ' -f3-))"

	# On a host with several GPUs the copy goes to another GPU than the
	# original's, as a device plugin would place a restored pod.
	local gpus=()
	if [ "$MODE" = gpu ] && [ -e /dev/nvidia1 ]; then
		gpus=(--gpus /dev/nvidia1)
		say "this host has several GPUs: demo-restored gets GPU 1 (demo ran on GPU 0), and cryo remaps the workload onto it"
	fi
	# A restore takes no rights from the checkpoint: the host's network
	# is granted again, as at the run.
	if [ "$MODE" = fake ]; then
		# The fake driver's GPU 0 needs a device node in the restored
		# container's spec, as a real one would: a stand-in (/dev/null's
		# numbers) that --gpus hands over as a device plugin would.
		mknod "$WORK/nvidia0" c 1 3
		gpus=(--gpus "$WORK/nvidia0")
		say "demo-restored gets the fake GPU 0 (a stand-in device node, $WORK/nvidia0)"
	fi
	private_net || gpus+=(--net-host)
	t=$(date +%s%N)
	cryo image restore --containerd --name demo-restored --log "$WORK/logs/restored.log" "${gpus[@]}" "$CKPT_IMAGE" >/dev/null 2>"$WORK/restore.log" || {
		echo "demo: the restore failed:" >&2
		cat "$WORK/restore.log" >&2
		echo "demo: CRIU's log says:" >&2
		find "$WORK/state" -name restore.log -exec grep -B3 -A1 -E 'Error|rror \(' {} + >&2 2>/dev/null | tail -25 >&2
		exit 1
	}
	wait_ticks "$WORK/logs/restored.log" 3
	local first; first=$(first_tick "$WORK/logs/restored.log")
	say "restored $CKPT_IMAGE as new container demo-restored in $(ms "$t") ms (cryo image restore --containerd; to its third tick)"
	say "demo-restored carried on: its first tick is $first (the checkpoint was taken after tick $before)"
	say "demo-restored now: $(tail -1 "$WORK/logs/restored.log")"
	say "demo (original) now: $(tail -1 "$WORK/logs/demo.log")"
	if [ ${#gpus[@]} -gt 0 ] && command -v nvidia-smi >/dev/null; then
		say "GPU processes now: $(nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader | tr '\n' ';')"
	fi
	if [ "$first" -le "$before" ] || [ "$first" -gt $((before + 50)) ]; then
		die "the counter did not carry on (first restored tick $first, checkpoint at $before)"
	fi
	say "done: the restored container continued the counter"
}

main "$@"
