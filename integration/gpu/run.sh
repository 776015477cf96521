#!/usr/bin/env bash
# make gpu-test: cryo's GPU acceptance run, on a host with an NVIDIA GPU.
#
# It uses the bundle from `make dist` (dist/cryo-bundle.tar.xz), so the host
# needs no package registry: only the NVIDIA driver, nvcc (to build the CUDA
# workload) and glibc >= 2.34. Logs and figures go to $OUT (default
# /tmp/cryo-gpu-out).
set -uo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/cryo-gpu-out}
mkdir -p "$OUT"
say() { printf '== %s\n' "$*"; }

bundle=${CRYO_BUNDLE_TAR:-$here/dist/cryo-bundle.tar.xz}
if [ -z "${CRYO_BUNDLE:-}" ]; then
	[ -f "$bundle" ] || { echo "gpu-test: $bundle missing: run \`make dist\` on a build machine and copy dist/ here" >&2; exit 1; }
	dest=${CRYO_BUNDLE_DIR:-/tmp/cryo-gpu}
	rm -rf "$dest" && mkdir -p "$dest"
	say "unpacking $bundle into $dest"
	xz -dc "$bundle" | tar -C "$dest" -xf - || exit 1
	# shellcheck disable=SC1091
	. "$dest/cryo-bundle/env.sh"
fi

# The NVIDIA libraries of the host (a read-only mount on some hosts).
for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
	[ -e "$d/libcuda.so.1" ] && export CRYO_NVIDIA_LIBS=${CRYO_NVIDIA_LIBS:-$d}
done
[ -n "${CRYO_NVIDIA_LIBS:-}" ] || { echo "gpu-test: libcuda.so.1 not found: is the NVIDIA driver installed? set CRYO_NVIDIA_LIBS" >&2; exit 1; }
export LD_LIBRARY_PATH=$CRYO_NVIDIA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CRYO_LIBCUDA=$CRYO_NVIDIA_LIBS/libcuda.so.1 CRYO_LIBNVML=$CRYO_NVIDIA_LIBS/libnvidia-ml.so.1

nvcc=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
[ -n "$nvcc" ] || { echo "gpu-test: nvcc not found: it builds the CUDA workload" >&2; exit 1; }
say "building the CUDA workload with $nvcc"
"$nvcc" -O2 -o "$CRYO_BIN/cudamem" "$here/contrib/workloads/cudamem/cudamem.cu" || exit 1
export CRYO_CUDAMEM=$CRYO_BIN/cudamem

{
	say "host"
	date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
	say "cryo doctor"
	cryo doctor
} 2>&1 | tee "$OUT/host.txt"

say "GPU tests"
export CRYO_GPU_REPORT=$OUT/figures.tsv
: >"$CRYO_GPU_REPORT"
(cd "$here/integration" && "$CRYO_BIN/integration.test" -test.run "${CRYO_GPU_TESTS:-^TestGPU}" -test.v -test.timeout ${CRYO_GPU_TIMEOUT:-7m}) 2>&1 | tee "$OUT/gpu-tests.log"
rc=${PIPESTATUS[0]}

if [ -f "$here/contrib/demo.sh" ]; then
	say "make demo (GPU branch)"
	bash "$here/contrib/demo.sh" 2>&1 | tee "$OUT/demo.log"
	drc=${PIPESTATUS[0]}
	[ "$rc" = 0 ] && rc=$drc
fi

say "figures (seconds)"
column -t -s $'\t' "$CRYO_GPU_REPORT" 2>/dev/null || cat "$CRYO_GPU_REPORT"
say "nvidia-smi after the run (no GPU memory should be left in use)"
nvidia-smi --query-gpu=memory.used --format=csv | tee -a "$OUT/host.txt"
[ "$rc" = 0 ] && say "gpu-test PASSED" || say "gpu-test FAILED ($rc)"
exit "$rc"
