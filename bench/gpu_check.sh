#!/usr/bin/env bash
# bench/gpu_check.sh: the CUDA backend on a real NVIDIA GPU, in one go (well under 8 minutes).
#
# Needs only the CUDA toolkit (nvcc, cuBLAS; NCCL optional), CMake >= 3.25 and Ninja: no hwloc,
# UCX, Google Benchmark or Debian -dev packages (GoogleTest is vendored in third_party/).
#   1. configures a minimal build (HAL, CUDA backend, CTS, tessera-cuda-bench) for this GPU's
#      architecture only, and builds just those targets;
#   2. runs the conformance suite: tessera-cts --backend cuda, with the kernel-module tests on the
#      CTS images built in step 1 (cts_kernels.fatbin with SASS for this GPU, cts_kernels.ptx for
#      the JIT path, from <build>/share/tessera/cts-kernels; the step fails if they are missing);
#   3. runs tessera-cuda-bench: D2D copy, reduce_async f32/bf16 (2 x 1 GiB) as a fraction of the
#      copy, pinned H2D/D2H through the backend vs cudaMemcpyAsync, bf16 GEMM 8192^3 through the
#      backend vs cublasGemmEx, printed as a markdown table;
#   4. runs the collectives' correctness suite on CUDA device memory (every operation, dtype and
#      reduction, 2 and 3 ranks: TESSERA_TEST_BACKEND=cuda) on the staged route, and on the native
#      route (NCCL) when there is one GPU per rank (NCCL refuses two ranks on one GPU); prints the
#      route the communicator took (TESSERA_LOG=info).
#   4b. the GPT trainer's kernels (examples/trainer/gpt) from their CUDA image (fatbin SASS for
#      this GPU, else PTX) against the same double-precision references and finite differences
#      as on the host backend (tessera_gpt_kernels_test, TESSERA_TEST_BACKEND=cuda);
#   5. when the tools are built (CLI11 and nlohmann-json found, as on a Debian machine after
#      scripts/setup.sh): `tessera bench coll` allreduce 64 MiB, 2 ranks, device memory, staged and
#      (one GPU per rank) native, next to host memory.
# Results (cts.log, bench.md, bench.json, coll_*.log, build.log) go to $OUT when set, else
# <build>/gpu_check.
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
  -DTESSERA_BUILD_BENCH=OFF -DTESSERA_BUILD_TESTS=ON \
  -DTESSERA_BACKEND_CUDA=ON -DTESSERA_BACKEND_HIP=OFF -DTESSERA_BACKEND_LEVEL_ZERO=OFF \
  -DTESSERA_CUDA_ARCHITECTURES="$CUDA_ARCH" -DTESSERA_CTS_CUDA_ARCHITECTURES="$CUDA_ARCH" \
  -DTESSERA_GPT_CUDA_ARCHITECTURES="$CUDA_ARCH" \
  >"$RESULTS/build.log" 2>&1 ||
  { tail -30 "$RESULTS/build.log"; exit 1; }
# The tools need CLI11 and nlohmann-json (absent on a bare GPU machine): build them when configured.
targets=(tessera-cts tessera-backend-cuda tessera-cuda-bench coll_correctness_test
         coll_correctness_rank tessera_cts_kernels_cuda tessera_gpt_kernels_test)
HAVE_TOOLS=0
if ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | grep -q '^tessera: '; then
  HAVE_TOOLS=1
  targets+=(tessera tessera-backend-host)
fi
say "building ${targets[*]}"
ninja -C "$BUILD_DIR" -j "$JOBS" "${targets[@]}" \
  >>"$RESULTS/build.log" 2>&1 || { tail -30 "$RESULTS/build.log"; exit 1; }
# The CTS's module tests load these (hal/cts/kernels/cuda): nvcc made them in the build above.
KERNEL_DIR="$BUILD_DIR/share/tessera/cts-kernels"
for image in cts_kernels.fatbin cts_kernels.ptx; do
  [[ -s "$KERNEL_DIR/$image" ]] || { echo "gpu_check: $KERNEL_DIR/$image was not built" >&2; exit 1; }
done
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
# The kernel-module tests (fatbin and PTX on this GPU): each must have run, not skipped.
say "kernel-module tests (images from $KERNEL_DIR):"
grep -E '^\[ +(OK|FAILED|SKIPPED) +\] [A-Za-z]*Module' "$RESULTS/cts.log" | sed 's/^/    /' || true
if ! grep -qE '^\[ +OK +\] [A-Za-z]*Module' "$RESULTS/cts.log"; then
  status=1
  say "  no kernel-module test ran (did the CTS find the images?)"
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
# ---- 4. collectives on CUDA device memory -------------------------------------------------------
GPUS=$(grep -c '^GPU ' "$RESULTS/nvidia-smi.txt" 2>/dev/null || echo 1)
coll_suite() {  # coll_suite ROUTE RANKS_FILTER
  local route=$1 filter=$2
  say "collectives correctness on cuda, route $route ($filter)"
  if TESSERA_TEST_BACKEND=cuda TESSERA_COLL_DEVICE_PATH=$route TESSERA_LOG=info \
     timeout 400 "$BUILD_DIR/bin/coll_correctness_test" --gtest_filter="$filter" \
     >"$RESULTS/coll_$route.log" 2>&1; then
    say "  passed; $(grep -m1 -o 'route[^"]*' "$RESULTS/coll_$route.log" || true)"
  else
    status=1
    say "  FAILED; the first failures:"
    grep -E 'FAIL|Failure' "$RESULTS/coll_$route.log" | head -20 || true
  fi
}
coll_suite staged 'Collectives.*AcrossTwoRanks:Collectives.*AcrossThreeRanks'
if [[ $GPUS -ge 2 ]]; then
  coll_suite native 'Collectives.*AcrossTwoRanks'
else
  say "native route (NCCL) not run: $GPUS GPU, and NCCL refuses two ranks on one GPU"
fi

# ---- 4b. the GPT trainer's kernels on the GPU -----------------------------------------------------
say "GPT kernels on cuda (tessera_gpt_kernels_test)"
if TESSERA_TEST_BACKEND=cuda timeout 300 "$BUILD_DIR/bin/tessera_gpt_kernels_test" \
   >"$RESULTS/gpt_kernels.log" 2>&1; then
  say "  passed: $(grep -E '^\[  PASSED  \]' "$RESULTS/gpt_kernels.log" | head -1)"
else
  status=1
  say "  FAILED; the first failures:"
  grep -E '^\[  FAILED  \]|Failure|error' "$RESULTS/gpt_kernels.log" | head -20 || true
fi

# ---- 5. tessera bench coll ------------------------------------------------------------------------
if [[ $HAVE_TOOLS == 1 ]]; then
  bench_coll() {  # bench_coll LABEL ENV... -- ARGS... (2 ranks, allreduce 64 MiB)
    local label=$1 tessera="$BUILD_DIR/bin/tessera"
    shift
    local env=()
    while [[ $1 != -- ]]; do env+=("$1"); shift; done
    shift
    say "tessera bench coll: $label"
    env "${env[@]}" timeout 120 "$tessera" launch -n 2 -- "$tessera" bench coll -b 64M -e 64M \
      -o allreduce "$@" >"$RESULTS/bench_coll_$label.txt" 2>&1 || status=1
    tail -4 "$RESULTS/bench_coll_$label.txt"
  }
  bench_coll host-memory -- -G 0
  bench_coll device-staged TESSERA_COLL_DEVICE_PATH=staged -- -G 1
  if [[ $GPUS -ge 2 ]]; then
    bench_coll device-native TESSERA_COLL_DEVICE_PATH=native -- -G 1
  fi
else
  say "tessera bench coll not run: the tools need CLI11 and nlohmann-json (scripts/setup.sh)"
fi

{
  echo
  echo "Measured $(date -u +%Y-%m-%d) by bench/gpu_check.sh; $(head -1 "$RESULTS/nvidia-smi.txt" 2>/dev/null)"
} >>"$RESULTS/bench.md"
say "done in $(($(date +%s) - START)) s, status $status"
exit $status
