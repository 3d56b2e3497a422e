#!/usr/bin/env bash
# Tessera's allreduce against OpenMPI's on this machine, side by side (docs/PERFORMANCE.md).
#
# Builds bench/mpi_allreduce.c (plain MPI_Allreduce) with mpicc and a one-file memcpy probe, then,
# for 2 ranks and for 4 ranks (oversubscribed on a 2-core machine), runs REPS times each:
#   mpirun --allow-run-as-root --oversubscribe -n N mpi_allreduce -b 8 -e 64M -f 2 -n ITERS -w WARMUP
#   tessera launch -n N -- tessera bench coll -o allreduce -d float -r sum -b 8 -e 64M -f 2 ...
# and single-core memcpy of 64 MiB, and prints medians: busbw of both, their ratio, Tessera's
# busbw as a fraction of memcpy's copy rate (64 MiB / time: bytes copied, not bytes touched), and
# the 8-byte latencies. Both programs time the same way: warmup, barrier, ITERS back-to-back calls,
# average per call, maximum over ranks; f32 sum, out of place, host memory. The 8-byte latency
# comes from separate runs of that size alone with LAT_ITERS calls (an average over 20 calls of
# ~1 us is dominated by any one preemption), same method for both.
#
# Usage: bench/coll_vs_mpi.sh [BUILD_DIR]   (default: build; needs BUILD_DIR/bin/tessera)
# Environment: REPS (5), ITERS (20), WARMUP (5), LAT_ITERS (2000), MAX_BYTES (64M), RANKS ("2 4").
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
tessera=${TESSERA:-$build/bin/tessera}
reps=${REPS:-5}
iters=${ITERS:-20}
warmup=${WARMUP:-5}
lat_iters=${LAT_ITERS:-2000}
max_bytes=${MAX_BYTES:-64M}
ranks_list=${RANKS:-2 4}

if [[ ! -x $tessera ]]; then
  echo "coll_vs_mpi.sh: $tessera not found; build it first (cmake --build $build --target tessera)" >&2
  exit 2
fi
for tool in mpicc mpirun cc; do
  command -v "$tool" >/dev/null || { echo "coll_vs_mpi.sh: $tool not found" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_allreduce" "$root/bench/mpi_allreduce.c"
cat >"$work/memcpy_bw.c" <<'C'
/* Single-core memcpy of 64 MiB: average copy rate (bytes copied / s) over 10 copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
int main(void) {
  const size_t bytes = (size_t)64 << 20;
  char* a = malloc(bytes);
  char* b = malloc(bytes);
  if (!a || !b) return 1;
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  memcpy(b, a, bytes);
  const int copies = 10;
  const double start = now();
  for (int i = 0; i < copies; ++i) {
    a[i] = (char)i; /* keep the copies from being merged */
    memcpy(b, a, bytes);
  }
  const double seconds = (now() - start) / copies;
  printf("%.3f\n", (double)bytes / 1e9 / seconds + 0 * b[7]);
  free(a);
  free(b);
  return 0;
}
C
cc -O2 -o "$work/memcpy_bw" "$work/memcpy_bw.c"

# One checked run first: a benchmark of wrong results is worthless.
"$tessera" launch -n 2 --no-tag-output -- "$tessera" bench coll -o allreduce -d float -r sum \
  -b 8 -e 1M -f 8 -n 1 -w 0 -c 1 >"$work/check.txt"
grep -q "Out of bounds values : 0 OK" "$work/check.txt" || {
  cat "$work/check.txt" >&2
  echo "coll_vs_mpi.sh: tessera bench coll found wrong results" >&2
  exit 1
}

# rows FILE: "size time busbw" of the out-of-place columns of an nccl-tests-style table.
rows() { awk '!/^#/ && NF >= 8 { print $1, $6, $8 }' "$1"; }
# median FILES... on stdin-less input: median of column COL for SIZE across the files.
median() {
  local size=$1 col=$2
  shift 2
  for f in "$@"; do rows "$f"; done | awk -v s="$size" -v c="$col" '$1 == s { print $c }' |
    sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "nan" }'
}

echo "# coll_vs_mpi.sh on $(hostname), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores"
echo "# $(mpirun --version 2>/dev/null | head -n 1); tessera $("$tessera" version | head -n 1)"
echo "# medians of $reps runs; -n $iters -w $warmup (8 B latency: -n $lat_iters); f32 sum, out of place, host memory"
echo "# load average before: $(cut -d ' ' -f 1-3 /proc/loadavg)"
for n in $ranks_list; do
  for rep in $(seq 1 "$reps"); do
    mpirun --allow-run-as-root --oversubscribe -n "$n" "$work/mpi_allreduce" -b 8 -e "$max_bytes" \
      -f 2 -n "$iters" -w "$warmup" >"$work/mpi.$n.$rep"
    "$tessera" launch -n "$n" --no-tag-output -- "$tessera" bench coll -o allreduce -d float \
      -r sum -b 8 -e "$max_bytes" -f 2 -n "$iters" -w "$warmup" -c 0 >"$work/tsr.$n.$rep"
    "$work/memcpy_bw" >"$work/memcpy.$n.$rep"
    mpirun --allow-run-as-root --oversubscribe -n "$n" "$work/mpi_allreduce" -b 8 -e 8 -f 2 \
      -n "$lat_iters" -w 100 >"$work/mpilat.$n.$rep"
    "$tessera" launch -n "$n" --no-tag-output -- "$tessera" bench coll -o allreduce -d float \
      -r sum -b 8 -e 8 -n "$lat_iters" -w 100 -c 0 >"$work/tsrlat.$n.$rep"
  done
  memcpy=$(cat "$work"/memcpy."$n".* | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  oversub=""
  (( n > $(nproc) )) && oversub=" (oversubscribed: $n ranks on $(nproc) cores)"
  echo
  echo "## $n ranks$oversub; single-core memcpy 64 MiB: $memcpy GB/s"
  echo
  echo "| size (B) | OpenMPI time (us) | OpenMPI busbw (GB/s) | Tessera time (us) | Tessera busbw (GB/s) | busbw ratio | Tessera / memcpy |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for size in $(rows "$work/tsr.$n.1" | awk '{ print $1 }'); do
    mt=$(median "$size" 2 "$work"/mpi."$n".*)
    mb=$(median "$size" 3 "$work"/mpi."$n".*)
    tt=$(median "$size" 2 "$work"/tsr."$n".*)
    tb=$(median "$size" 3 "$work"/tsr."$n".*)
    awk -v s="$size" -v mt="$mt" -v mb="$mb" -v tt="$tt" -v tb="$tb" -v m="$memcpy" 'BEGIN {
      ratio = mb > 0 ? sprintf("%.2f", tb / mb) : "-"
      printf "| %s | %.2f | %.2f | %.2f | %.2f | %s | %.2f |\n", s, mt, mb, tt, tb, ratio, tb / m }'
  done
  awk -v n="$n" -v m="$memcpy" \
    -v b64="$(median 67108864 3 "$work"/mpi."$n".*)" -v t64="$(median 67108864 3 "$work"/tsr."$n".*)" \
    -v b1="$(median 1048576 3 "$work"/mpi."$n".*)" -v t1="$(median 1048576 3 "$work"/tsr."$n".*)" \
    -v l8m="$(median 8 2 "$work"/mpilat."$n".*)" -v l8t="$(median 8 2 "$work"/tsrlat."$n".*)" 'BEGIN {
      printf "\nTargets (%d ranks):\n", n
      printf "- 64 MiB busbw: Tessera %.2f vs OpenMPI %.2f GB/s = %.2fx (target >= 2x): %s\n", t64, b64, t64 / b64, (t64 >= 2 * b64 ? "met" : "NOT met")
      printf "- 64 MiB busbw vs memcpy: %.2f / %.2f GB/s = %.0f%% (target >= 50%%): %s\n", t64, m, 100 * t64 / m, (t64 >= 0.5 * m ? "met" : "NOT met")
      printf "- 1 MiB busbw: Tessera %.2f vs OpenMPI %.2f GB/s = %.2fx (target >= 1x): %s\n", t1, b1, t1 / b1, (t1 >= b1 ? "met" : "NOT met")
      printf "- 8 B latency (-n '"$lat_iters"'): Tessera %.2f vs OpenMPI %.2f us = %.2fx (target <= 1.5x): %s\n", l8t, l8m, l8t / l8m, (l8t <= 1.5 * l8m ? "met" : "NOT met")
    }'
done
echo
echo "# load average after: $(cut -d ' ' -f 1-3 /proc/loadavg)"
