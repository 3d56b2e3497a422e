#!/usr/bin/env bash
# bench/gpu_check.sh: the CUDA backend on a real NVIDIA GPU, in one go (well under 8 minutes).
#
# Needs only the CUDA toolkit (nvcc, cuBLAS; NCCL optional), CMake >= 3.25 and Ninja: no hwloc,
# UCX, Google Benchmark or Debian -dev packages (GoogleTest is vendored in third_party/).
#   1. configures a minimal build (HAL, CUDA backend, CTS, tessera-cuda-bench) for this GPU's
#      architecture only, and builds just those targets;
#   2. runs the conformance suite: tessera-cts --backend cuda;
#   3. runs tessera-cuda-bench: D2D copy, reduce_async f32/bf16 (2 x 1 GiB) as a fraction of the
#      copy, pinned H2D/D2H through the backend vs cudaMemcpyAsync, bf16 GEMM 8192^3 through the
#      backend vs cublasGemmEx, printed as a markdown table.
# Results (cts.log, bench.md, bench.json, build.log) go to $OUT when set, else <build>/gpu_check.
#
#   bench/gpu_check.sh [--build-only]      BUILD_DIR=... JOBS=... CUDA_ARCH="90" to override
#
# Exit status: 0 all passed, 1 a step failed, 2 no CUDA device (the reason is printed).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu-check}
RESULTS=${OUT:-$BUILD_DIR/gpu_check}
JOBS=${JOBS:-$(nproc)}
BUILD_ONLY=0
[[ "${1:-}" == "--build-only" ]] && BUILD_ONLY=1
START=$(date +%s)
mkdir -p "$RESULTS"

say() { printf '[gpu_check %3ds] %s\n' "$(($(date +%s) - START))" "$*"; }
no_device() {
  echo "gpu_check: no CUDA device: $*" >&2
  exit 2
}

# ---- 0. a GPU, and its architecture ------------------------------------------------------------
if [[ -z "${CUDA_ARCH:-}" ]]; then
  CUDA_ARCH="80;90"
  if command -v nvidia-smi >/dev/null 2>&1 &&
     cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1) &&
     [[ "$cap" =~ ^[0-9]+\.[0-9]+$ ]]; then
    CUDA_ARCH=${cap/./}
  fi
fi
if [[ $BUILD_ONLY == 0 ]]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L >"$RESULTS/nvidia-smi.txt" 2>&1 || no_device "$(head -1 "$RESULTS/nvidia-smi.txt")"
    grep -q '^GPU ' "$RESULTS/nvidia-smi.txt" || no_device "nvidia-smi lists no GPU"
  elif [[ ! -e /dev/nvidiactl ]]; then
    no_device "no NVIDIA driver (nvidia-smi not found, /dev/nvidiactl missing)"
  fi
fi
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x "$NVCC" ]] || { echo "gpu_check: nvcc not found (set CUDACXX or PATH)" >&2; exit 1; }
say "GPU architecture(s) ${CUDA_ARCH}, nvcc $NVCC, $JOBS jobs, results in $RESULTS"

# ---- 1. build -----------------------------------------------------------------------------------
say "configuring $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$NVCC" \
  -DTESSERA_BUILD_TOOLS=OFF -DTESSERA_BUILD_BENCH=OFF -DTESSERA_BUILD_TESTS=ON \
  -DTESSERA_BACKEND_CUDA=ON -DTESSERA_BACKEND_HIP=OFF -DTESSERA_BACKEND_LEVEL_ZERO=OFF \
  -DTESSERA_CUDA_ARCHITECTURES="$CUDA_ARCH" >"$RESULTS/build.log" 2>&1 ||
  { tail -30 "$RESULTS/build.log"; exit 1; }
say "building tessera-cts, tessera-backend-cuda, tessera-cuda-bench"
ninja -C "$BUILD_DIR" -j "$JOBS" tessera-cts tessera-backend-cuda tessera-cuda-bench \
  >>"$RESULTS/build.log" 2>&1 || { tail -30 "$RESULTS/build.log"; exit 1; }
if [[ $BUILD_ONLY == 1 ]]; then
  say "built; --build-only: not running"
  exit 0
fi

# ---- 2. conformance suite -----------------------------------------------------------------------
status=0
say "tessera-cts --backend cuda"
if timeout 300 "$BUILD_DIR/bin/tessera-cts" --backend cuda >"$RESULTS/cts.log" 2>&1; then
  say "CTS passed: $(grep -E '^\[  PASSED  \]' "$RESULTS/cts.log" | head -1)"
else
  status=1
  say "CTS FAILED (exit $?); failing tests:"
  grep -E '^\[  FAILED  \]' "$RESULTS/cts.log" | sort -u | head -40 || true
fi
if grep -q 'backend init failed' "$RESULTS/cts.log"; then
  no_device "$(grep -m1 -o 'backend init failed: .*' "$RESULTS/cts.log")"
fi

# ---- 3. measurements ----------------------------------------------------------------------------
say "tessera-cuda-bench (1 GiB buffers, GEMM 8192^3)"
set +e
timeout 240 "$BUILD_DIR/bin/tessera-cuda-bench" --mib 1024 --gemm 8192 --reps 10 \
  --json "$RESULTS/bench.json" >"$RESULTS/bench.md" 2>"$RESULTS/bench.err"
bench=$?
set -e
cat "$RESULTS/bench.md"
if [[ $bench == 2 ]]; then no_device "$(cat "$RESULTS/bench.err")"; fi
if [[ $bench != 0 ]]; then
  status=1
  say "tessera-cuda-bench FAILED (exit $bench): $(cat "$RESULTS/bench.err")"
fi
{
  echo
  echo "Measured $(date -u +%Y-%m-%d) by bench/gpu_check.sh; $(head -1 "$RESULTS/nvidia-smi.txt" 2>/dev/null)"
} >>"$RESULTS/bench.md"
say "done in $(($(date +%s) - START)) s, status $status"
exit $status
