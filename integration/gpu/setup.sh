# Sourced by run.sh (make gpu-test) and bench.sh (make bench): unpack the
# bundle of `make dist`, find the host's NVIDIA libraries, build the CUDA
# workload with nvcc. Expects $here (the checkout) and $OUT; defines say().
say() { printf '== %s\n' "$*"; }

bundle=${CRYO_BUNDLE_TAR:-$here/dist/cryo-bundle.tar.xz}
if [ -z "${CRYO_BUNDLE:-}" ]; then
	[ -f "$bundle" ] || { echo "gpu: $bundle missing: run \`make dist\` on a build machine and copy dist/ here" >&2; exit 1; }
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
[ -n "${CRYO_NVIDIA_LIBS:-}" ] || { echo "gpu: libcuda.so.1 not found: is the NVIDIA driver installed? set CRYO_NVIDIA_LIBS" >&2; exit 1; }
export LD_LIBRARY_PATH=$CRYO_NVIDIA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CRYO_LIBCUDA=$CRYO_NVIDIA_LIBS/libcuda.so.1 CRYO_LIBNVML=$CRYO_NVIDIA_LIBS/libnvidia-ml.so.1

nvcc=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
[ -n "$nvcc" ] || { echo "gpu: nvcc not found: it builds the CUDA workload" >&2; exit 1; }
say "building the CUDA workload with $nvcc"
"$nvcc" -O2 -o "$CRYO_BIN/cudamem" "$here/contrib/workloads/cudamem/cudamem.cu" || exit 1
export CRYO_CUDAMEM=$CRYO_BIN/cudamem
# The PyTorch workloads (contrib/workloads) and the host's Python with PyTorch.
export CRYO_WORKLOADS=$here/contrib/workloads
[ -x /opt/torch/.venv/bin/python3 ] && export CRYO_PYTHON=${CRYO_PYTHON:-/opt/torch/.venv/bin/python3}
