#!/usr/bin/env bash
# make gpu-test: cryo's GPU acceptance run, on a host with an NVIDIA GPU.
#
# It uses the bundle from `make dist` (dist/cryo-bundle.tar.xz), so the host
# needs no package registry: only the NVIDIA driver, nvcc (to build the CUDA
# workload) and glibc >= 2.34. Logs and figures go to $OUT (default
# /tmp/cryo-gpu-out). CRYO_GPU_TESTS picks tests (default ^TestGPU),
# CRYO_GPU_DEMO=0 skips the demo.
set -uo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/cryo-gpu-out}
mkdir -p "$OUT"
# shellcheck source=integration/gpu/setup.sh
. "$here/integration/gpu/setup.sh"

{
	say "host"
	date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
	say "cryo doctor"
	cryo doctor
} 2>&1 | tee "$OUT/host.txt"

say "GPU tests"
export CRYO_GPU_REPORT=$OUT/figures.tsv
: >"$CRYO_GPU_REPORT"
(cd "$here/integration/gpu" && "$CRYO_BIN/gpu.test" -test.run "${CRYO_GPU_TESTS:-^TestGPU}" -test.v -test.timeout ${CRYO_GPU_TIMEOUT:-8m}) 2>&1 | tee "$OUT/gpu-tests.log"
rc=${PIPESTATUS[0]}

# The demo clones its container where the clone test could (CRIU can
# checkpoint a private network namespace on this host); else it migrates.
grep -q -- '--- PASS: TestGPUClone ' "$OUT/gpu-tests.log" || export CRYO_DEMO_NET=${CRYO_DEMO_NET:-host}
if [ -f "$here/contrib/demo.sh" ] && [ "${CRYO_GPU_DEMO:-1}" != 0 ]; then
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
