#!/usr/bin/env bash
# Side by side, in one run: allreduce of 64 MiB over 2 ranks (tessera launch, shared memory) with
#   host      host memory, plain host devices (the reference),
#   staged    device memory of discrete host devices (TESSERA_HOST_DEVICES=1:discrete: the CPU
#             cannot touch it), moved through the communicator's pinned buffers (the staged route),
#   native    the same device memory through the backend's collective library: the host
#             backend's reference CCL (TESSERA_HOST_CCL=1, TESSERA_COLL_DEVICE_PATH=native).
# Each configuration runs ROUNDS times (interleaved, so drift hits all alike); the script prints
# every run's busbw and the median per configuration, then staged/host.
#
#   bench/coll_device_memory.sh [BUILD_DIR] [ROUNDS] [SIZE]     (defaults: build 5 64M)
#
# Needs the tessera tool built (ninja -C build tessera tessera-backend-host).
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
size=${3:-64M}
tessera="$build/bin/tessera"
export TESSERA_BACKEND_PATH="${TESSERA_BACKEND_PATH:-$build/lib/tessera}"
unset TESSERA_COLL_DEVICE_PATH TESSERA_COLL_MEMORY

# busbw (GB/s, out of place) of one run: the last column group of the row is in place.
run() {  # NAME ENV... -- ARGS...
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" "$tessera" launch -n 2 -- "$tessera" bench coll -b "$size" -e "$size" \
      -n 20 -w 5 -c 1 "$@" 2>&1 | awk '/^\[rank 0\] +[0-9]/ { print $10; found = 1 }
      /^\[rank 0\] #.*memory:/ { sub(/.*memory: /, ""); header = $0 }
      END { if (!found) exit 1 }' || echo "failed"
}

declare -A results
configs=(host staged native)
for ((i = 1; i <= rounds; i++)); do
  results[host]+=" $(run TESSERA_HOST_DEVICES=1 -- -G 0)"
  results[staged]+=" $(run TESSERA_HOST_DEVICES=1:discrete TESSERA_COLL_DEVICE_PATH=staged -- -G 1)"
  results[native]+=" $(run TESSERA_HOST_DEVICES=1:discrete TESSERA_HOST_CCL=1 TESSERA_COLL_DEVICE_PATH=native -- -G 1)"
done

median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END {
  if (NR == 0) { print "n/a"; exit } print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# allreduce $size, 2 ranks, out-of-place busbw (GB/s), $rounds runs each, $(date -u +%F)"
for c in "${configs[@]}"; do
  printf '%-7s median %-8s runs:%s\n' "$c" "$(echo "${results[$c]}" | median)" "${results[$c]}"
done
h=$(echo "${results[host]}" | median)
s=$(echo "${results[staged]}" | median)
if [ "$h" != "n/a" ] && [ "$s" != "n/a" ]; then
  awk -v h="$h" -v s="$s" 'BEGIN { printf "staged / host = %.0f%%\n", 100 * s / h }'
fi
nat=$(echo "${results[native]}" | median)
if [ "$h" != "n/a" ] && [ "$nat" != "n/a" ]; then
  awk -v h="$h" -v s="$nat" 'BEGIN { printf "native / host = %.0f%%\n", 100 * s / h }'
fi
