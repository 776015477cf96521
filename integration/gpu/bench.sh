#!/usr/bin/env bash
# make bench: cryo's GPU benchmarks, on a host with an NVIDIA GPU, from the
# bundle of `make dist` (like make gpu-test). It runs TestBenchGPU
# (integration/gpu/gpu_bench_test.go): checkpoint and restore through cryo-runc
# and through the raw sequence (`cryo cuda suspend` + plain runc; plain runc
# restore + `cryo cuda resume`) side by side, at each size of
# CRYO_BENCH_MIB (default "4096 16384"), several CUDA processes, the
# PyTorch inference server against its cold start, and the transformers
# server at full size (llmserve: 8 GiB of weights, a zeroed 32 GiB KV cache). Then bench_report.py
# writes $OUT/benchmarks-table.md and the plots $OUT/benchmarks.png and
# $OUT/benchmarks-restore.png.
#
# A 16 GiB workload makes a ~17 GB image: each image is deleted before the
# next run. Knobs: CRYO_BENCH_PROCS (4), CRYO_BENCH_PROC_MIB (4096),
# CRYO_SERVE_GIB (3), CRYO_BENCH_SERVE=0, CRYO_BENCH_ZSTD=0, CRYO_BENCH_LLM=0,
# CRYO_BENCH_LLM_SLEEP=0 (no "with sleep hook" rows of the transformers server),
# CRYO_LLM_WEIGHTS_GIB (8), CRYO_LLM_CACHE_GIB (32) or CRYO_LLM_GPU_UTIL
# (0.9: the cache fills the GPU to 90 %), CRYO_BENCH_ORDER ("cryo raw"; "cryo"
# alone skips the baseline), CRYO_BENCH_THP=1 (the CUDA workload again with
# transparent huge pages "always"; CRYO_BENCH_THP_MIB sizes it, "none" skips
# it; CRYO_BENCH_THP_LLM=1 adds the transformers server). TestBenchCRIU
# (integration/gpu/bench_criu_test.go) then restores one image with stock and
# patched CRIU side by side ($OUT/bench-criu.tsv).
#
# TestBenchShim ($OUT/bench-shim.tsv, CRYO_BENCH_SHIM_MIB, default 1024) adds
# the Kubernetes route through CRI (CRYO_BENCH_SHIM_CRI=0 skips it, =only runs
# it and cryo-runc alone; CRYO_BENCH_SHIM_TIMEOUT, 15m). Its copies of the
# checkpoint go once read, so it needs three times the checkpoint's size of
# free disk (~52 GB at 16 GiB); the routes through containerd's client need
# about nine times it: run a large size with CRYO_BENCH_SHIM_CRI=only.
set -uo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/cryo-bench-out}
mkdir -p "$OUT"
# shellcheck source=integration/gpu/setup.sh
. "$here/integration/gpu/setup.sh"

{
	printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%MZ)"
	printf 'device\t%s\n' "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
	printf 'driver\t%s\n' "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
	printf 'kernel\t%s\n' "$(uname -r)"
	printf 'cpus\t%s\n' "$(nproc)"
	printf 'memory\t%s\n' "$(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	# The commit of the binaries that ran (the bundle's), not of the checkout.
	printf 'cryo\t%s\n' "$("$CRYO_BIN/cryo" version 2>/dev/null | sed -n '1s/.*(commit \([^,]*\),.*/\1/p')"
	printf 'criu\t%s\n' "$(criu --version 2>/dev/null | sed -n 's/Version: //p')"
	printf 'runc\t%s\n' "$("${CRYO_RUNC:-runc}" --version 2>/dev/null | sed -n '1s/runc version //p')"
	printf 'python\t%s\n' "$("${CRYO_PYTHON:-python3}" -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__)' 2>/dev/null)"
} | tee "$OUT/bench-host.tsv"

say "benchmarks"
export CRYO_BENCH=1 CRYO_BENCH_OUT=$OUT/bench.tsv
: >"$CRYO_BENCH_OUT"
(cd "$here/integration/gpu" && "$CRYO_BIN/gpu.test" -test.run '^TestBenchGPU$' -test.v -test.timeout "${CRYO_BENCH_TIMEOUT:-40m}") 2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
# TestBenchShim: cryo-runc against the containerd shim's content-store and
# image-path routes and the CRI route, same workload (CRYO_BENCH_SHIM_MIB, default 1024);
# its rows go to bench-shim.tsv, apart from the report's. "none" skips it.
# On a GPU host its containers share the host's network (each restore is
# granted it again); CRYO_BENCH_SHIM_HOSTNET=0 gives them their own.
: >"$OUT/bench-shim.tsv"
if [ "${CRYO_BENCH_SHIM_MIB:-}" != none ]; then
	(cd "$here/integration/gpu" && CRYO_BENCH_OUT=$OUT/bench-shim.tsv "$CRYO_BIN/gpu.test" -test.run '^TestBenchShim$' -test.v -test.timeout "${CRYO_BENCH_SHIM_TIMEOUT:-15m}") 2>&1 | tee "$OUT/bench-shim.log"
	[ "${PIPESTATUS[0]}" = 0 ] || rc=${rc/#0/1}
fi

# CRIU's restore of private anonymous memory: stock CRIU against cryo's
# patched one (contrib/criu), same image (CRYO_BENCH_CRIU_MIB, "1024 4096";
# "none" skips it).
: >"$OUT/bench-criu.tsv"
if [ "${CRYO_BENCH_CRIU_MIB:-}" != none ]; then
	say "CRIU restore, stock and patched"
	(cd "$here/integration/gpu" && CRYO_BENCH_OUT=$OUT/bench-criu.tsv "$CRYO_BIN/gpu.test" -test.run '^TestBenchCRIU$' -test.v -test.timeout 8m) 2>&1 | tee "$OUT/bench-criu.log"
	[ "${PIPESTATUS[0]}" = 0 ] || rc=${rc/#0/1}
fi

# CRYO_BENCH_THP=1: the CUDA workload again with transparent huge pages set
# to "always" (a host-wide setting, put back afterwards), side by side.
thp=/sys/kernel/mm/transparent_hugepage/enabled
if [ "${CRYO_BENCH_THP:-0}" = 1 ] && [ -w "$thp" ]; then
	was=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp")
	say "transparent huge pages: always (was $was)"
	echo always >"$thp"
	(cd "$here/integration/gpu" && CRYO_BENCH_OUT=$OUT/bench-thp.tsv CRYO_BENCH_MIB=${CRYO_BENCH_THP_MIB:-4096} CRYO_BENCH_PROCS=1 CRYO_BENCH_SERVE=0 \
		CRYO_BENCH_LLM=${CRYO_BENCH_THP_LLM:-0} CRYO_BENCH_WARMUP=0 \
		"$CRYO_BIN/gpu.test" -test.run '^TestBenchGPU$' -test.v -test.timeout "${CRYO_BENCH_TIMEOUT:-40m}") 2>&1 | tee "$OUT/bench-thp.log"
	echo "$was" >"$thp"
fi

say "report"
"${CRYO_PYTHON:-python3}" "$here/integration/gpu/bench_report.py" "$OUT/bench-host.tsv" "$OUT/bench.tsv" "$OUT/benchmarks-table.md" "$OUT/benchmarks.png" "$OUT/bench-criu.tsv" "$OUT/bench-shim.tsv" || rc=${rc/#0/1}
cat "$OUT/benchmarks-table.md" 2>/dev/null
if [ -s "$OUT/bench-thp.tsv" ]; then
	say "with transparent huge pages always"
	"${CRYO_PYTHON:-python3}" "$here/integration/gpu/bench_report.py" "$OUT/bench-host.tsv" "$OUT/bench-thp.tsv" "$OUT/benchmarks-thp-table.md" "$OUT/benchmarks-thp.png" && cat "$OUT/benchmarks-thp-table.md"
fi
[ "$rc" = 0 ] && say "bench PASSED" || say "bench FAILED ($rc)"
exit "$rc"
