#!/usr/bin/env bash
# bench/gpu_check.sh: the CUDA backend on a real NVIDIA GPU, in one go (well under 8 minutes).
#
# Needs only the CUDA toolkit (nvcc, cuBLAS; NCCL optional), CMake >= 3.25 and Ninja: no hwloc,
# UCX, Google Benchmark or Debian -dev packages (GoogleTest, nlohmann-json, CLI11, xxhash and zstd's
# headers are copied in third_party/; zstd's library is the base system's libzstd.so.1).
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
#   4c. a short GPT training run on the GPU: the 1-rank model tests (gradients against finite
#      differences, loss falling, bitwise repetition: tessera_gpt_model_test, TESSERA_TEST_BACKEND=
#      cuda), then tessera-gpt-train --backend cuda, 20 steps of demo-llama on one GPU and, through
#      `tessera launch`, on 2 ranks sharing it (dp 2, staged route), with --json-summary: the loss
#      must fall; tokens/s printed (gpt_train_*.log, gpt_train.md);
#   5. when the tools are built: `tessera bench coll` allreduce 64 MiB, 2 ranks, device memory,
#      staged and (one GPU per rank) native, next to host memory;
#   6. when the tools are built: the planner's calibration, `tessera plan --calibrate --device
#      cuda:0` (bf16 GEMMs 128^3 .. 8192^3, a device copy, the fitted peak and knee), and a plan
#      priced with it (calibration.json, calibration.txt).
# Results (cts.log, bench.md, bench.json, coll_*.log, gpt_*.log, gpt_train.md, calibration.json,
# calibration.txt, build.log) go to
# $OUT when set, else <build>/gpu_check. They are more than 8 files: where only 8 come back from
# $OUT, run `OUT= BUILD_DIR=/tmp/gc bench/gpu_check.sh; tar czf "$OUT/gpu_check.tgz" -C /tmp/gc
# gpu_check`.
#
#   bench/gpu_check.sh [--build-only]      BUILD_DIR=... JOBS=... CUDA_ARCH="90" to override
#
# GPU_CHECK_HIDE_DEBIAN=1 configures as if none of Debian's -dev packages were installed (to check
# on a Debian machine, without a GPU, that the tree builds on the GPU machine: --build-only): the
# packages' find_package, pkg-config and /usr/include, /usr/lib/<triplet> are hidden from CMake.
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
hide=()
if [[ "${GPU_CHECK_HIDE_DEBIAN:-0}" == 1 ]]; then
  triplet=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
  for pkg in nlohmann_json CLI11 GTest benchmark BLAS; do
    hide+=("-DCMAKE_DISABLE_FIND_PACKAGE_$pkg=ON")
  done
  hide+=(-DTESSERA_WITH_HWLOC=OFF -DTESSERA_WITH_UCX=OFF
         "-DCMAKE_IGNORE_PATH=/usr/include;/usr/include/$triplet;/usr/lib/$triplet;/lib/$triplet")
  # CUDA's static runtime needs librt (libc6-dev, present on the GPU machine): hidden above, named.
  for rt in /usr/lib/"$triplet"/librt.{so,a}; do
    [[ -e "$rt" ]] && { hide+=("-DCUDAToolkit_rt_LIBRARY=$rt"); break; }
  done
  export PKG_CONFIG_LIBDIR=/nonexistent  # hwloc, UCX, zstd, xxhash
  say "hiding Debian's -dev packages: ${hide[*]}"
fi
say "configuring $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${hide[@]+"${hide[@]}"} \
  -DCMAKE_CUDA_COMPILER="$NVCC" \
  -DTESSERA_BUILD_BENCH=OFF -DTESSERA_BUILD_TESTS=ON -DTESSERA_WITH_PYTHON=OFF \
  -DTESSERA_BACKEND_CUDA=ON -DTESSERA_BACKEND_HIP=OFF -DTESSERA_BACKEND_LEVEL_ZERO=OFF \
  -DTESSERA_CUDA_ARCHITECTURES="$CUDA_ARCH" -DTESSERA_CTS_CUDA_ARCHITECTURES="$CUDA_ARCH" \
  -DTESSERA_GPT_CUDA_ARCHITECTURES="$CUDA_ARCH" \
  >"$RESULTS/build.log" 2>&1 ||
  { tail -30 "$RESULTS/build.log"; exit 1; }
# The tools and the GPT trainer build from the copies in third_party/ where Debian's packages are
# absent; a target that is still not configured (the build log says why) leaves its step out.
targets=(tessera-cts tessera-backend-cuda tessera-cuda-bench coll_correctness_test
         coll_correctness_rank tessera_cts_kernels_cuda tessera_gpt_kernels_test)
configured=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | sed -n 's/^\([^ :]*\): .*/\1/p')
have() { grep -qx -- "$1" <<<"$configured"; }
HAVE_TOOLS=0
if have tessera; then
  HAVE_TOOLS=1
  targets+=(tessera tessera-backend-host)
fi
HAVE_GPT_TESTS=0
if have tessera_gpt_model_test; then
  HAVE_GPT_TESTS=1
  targets+=(tessera_gpt_model_test)
fi
HAVE_GPT_TRAIN=0
if have tessera-gpt-train; then
  HAVE_GPT_TRAIN=1
  targets+=(tessera-gpt-train)
fi
say "configured: tools $HAVE_TOOLS, GPT model tests $HAVE_GPT_TESTS," \
    "tessera-gpt-train $HAVE_GPT_TRAIN"
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

# ---- 4c. a short GPT training run on the GPU ---------------------------------------------------
if [[ $HAVE_GPT_TESTS == 1 ]]; then
  # The 1-rank tests (the forked tp/dp/pp ones compare ranks on host devices).
  say "GPT model on cuda, 1 rank (tessera_gpt_model_test: gradients, training, repetition)"
  if TESSERA_TEST_BACKEND=cuda timeout 300 "$BUILD_DIR/bin/tessera_gpt_model_test" \
     --gtest_filter='GptConfig.*:Tiny/GptGradient.*:GptGradient.*:GptTraining.*' \
     >"$RESULTS/gpt_model.log" 2>&1; then
    say "  passed: $(grep -E '^\[  PASSED  \]' "$RESULTS/gpt_model.log" | head -1)"
    grep -E '^(step [0-9]+ loss|gradient check)' "$RESULTS/gpt_model.log" | sed 's/^/    /' || true
  else
    status=1
    say "  FAILED; the first failures:"
    grep -E '^\[  FAILED  \]|Failure|error' "$RESULTS/gpt_model.log" | head -20 || true
  fi
else
  status=1
  say "GPT model tests not built (tessera_gpt_model_test not configured: see $RESULTS/build.log)"
fi
if [[ $HAVE_GPT_TRAIN == 1 ]]; then
  gpt_train="$BUILD_DIR/bin/tessera-gpt-train"
  # demo-llama (4 layers, hidden 64, `tessera demo`'s model): 20 steps at lr 1e-2 take it from
  # log(256) = 5.55 nats to about 3.3 on the host backend (the check asks for 0.5 nats less).
  gpt_args=(--backend cuda --config "$ROOT/examples/trainer/configs/demo-llama.json" --steps 20
            --micro-batch 16 --seq 64 --lr 1e-2 --json-summary)
  echo "| run | first loss | last loss | tokens/s | median step ms |" >"$RESULTS/gpt_train.md"
  echo "| --- | --- | --- | --- | --- |" >>"$RESULTS/gpt_train.md"
  gpt_run() {  # gpt_run LABEL COMMAND...: the loss must fall from step 1 to step 20
    local label=$1 log="$RESULTS/gpt_train_$1.log"
    shift
    say "tessera-gpt-train on cuda: $label (demo-llama, 20 steps of 16 x 64 tokens per rank)"
    local rc=0
    timeout 180 "$@" >"$log" 2>&1 || rc=$?
    if [[ $rc != 0 ]]; then
      status=1
      say "  FAILED (exit $rc):"
      tail -8 "$log" | sed 's/^/    /'
      return
    fi
    local first last summary
    # rank 0's lines (under `tessera launch` prefixed "[rank 0] ")
    first=$(grep -m1 -oE '^(\[rank 0\] )?step 1 loss [0-9.]+' "$log" | awk '{print $NF}')
    last=$(grep -oE '^(\[rank 0\] )?step [0-9]+ loss [0-9.]+' "$log" | tail -1 | awk '{print $NF}')
    summary=$(grep -m1 -E '^(\[rank 0\] )?\{"summary"' "$log" || true)
    local tps med
    tps=$(sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' <<<"$summary")
    med=$(sed -n 's/.*"step_s_median": \([0-9.]*\).*/\1/p' <<<"$summary")
    med=$(awk -v s="${med:-0}" 'BEGIN{printf "%.2f", s*1e3}')
    echo "| $label | $first | $last | $tps | $med |" >>"$RESULTS/gpt_train.md"
    if [[ -z "$first" || -z "$last" || -z "$summary" ]] ||
       ! awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a - 0.5)}'; then
      status=1
      say "  FAILED: no summary, or the loss did not fall by 0.5 nats" \
          "(step 1 ${first:-?}, last ${last:-?})"
    else
      say "  loss $first -> $last, $tps tokens/s"
    fi
  }
  gpt_run 1rank "$gpt_train" "${gpt_args[@]}"
  if [[ $HAVE_TOOLS == 1 ]]; then
    # Two ranks on one GPU: NCCL refuses that, so the dp allreduce takes the staged route.
    gpt_run 2ranks-staged env TESSERA_COLL_DEVICE_PATH=staged TESSERA_LOG=info \
      "$BUILD_DIR/bin/tessera" launch -n 2 -- "$gpt_train" "${gpt_args[@]}"
  else
    say "tessera-gpt-train on 2 ranks not run: no launcher (the tessera command is not built)"
  fi
  cat "$RESULTS/gpt_train.md"
else
  status=1
  say "tessera-gpt-train not built (not configured: see $RESULTS/build.log)"
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
  say "tessera bench coll not run: the tessera command is not built (see $RESULTS/build.log)"
fi

# ---- 6. the planner's calibration on this GPU --------------------------------------------------
# bf16 GEMMs (fp32 accumulation) from 128^3 to 8192^3 and a device copy through the HAL, fitted
# to the cost model's curve (peak, knee): what docs/PLANNER.md compares with the H100 preset's
# figures (0.8 x 989 TFLOP/s, knee 247 by the FLOP/byte argument). Then a plan priced with it:
# a DGX H100's 8 GPUs with this GPU's measured figures (one GPU alone holds no 7B Adam state).
if [[ $HAVE_TOOLS == 1 ]]; then
  say "tessera plan --calibrate --device cuda:0 (bf16)"
  if timeout 120 "$BUILD_DIR/bin/tessera" plan --calibrate --device cuda:0 --dtype bf16 \
      --calibration-out "$RESULTS/calibration.json" >"$RESULTS/calibration.txt" 2>&1; then
    cat "$RESULTS/calibration.txt"
    timeout 60 "$BUILD_DIR/bin/tessera" plan --calibration "$RESULTS/calibration.json" \
      --cluster dgx-h100 --devices 8 --model llama2-7b --global-batch 64 --seq-len 4096 \
      --top 3 --explain \
      >>"$RESULTS/calibration.txt" 2>&1 || status=1
  else
    status=1
    say "tessera plan --calibrate FAILED: $(tail -2 "$RESULTS/calibration.txt")"
  fi
else
  say "calibration not run: the tessera command is not built (see $RESULTS/build.log)"
fi

{
  echo
  echo "Measured $(date -u +%Y-%m-%d) by bench/gpu_check.sh; $(head -1 "$RESULTS/nvidia-smi.txt" 2>/dev/null)"
} >>"$RESULTS/bench.md"
say "done in $(($(date +%s) - START)) s, status $status"
exit $status
