#!/usr/bin/env bash
# Hierarchical against flat ring allreduce across two emulated hosts (docs/PERFORMANCE.md, "Across
# two hosts"): brings up two namespace hosts joined by a link shaped to RATE
# (scripts/netns-hosts.sh), starts one `tessera launch` per host with 2 ranks each (4 ranks, the
# ranks of a host sharing memory, the hosts only the link), and runs `tessera bench coll`
# (allreduce, f32 sum, host memory) RUNS times with TESSERA_COLL_ALGO=allreduce:ring and
# allreduce:hierarchical in turn. Prints per size: each run's out-of-place busbw and the median,
# for both algorithms, hierarchical / ring, and busbw against the link rate. (busbw = algbw x
# 2(n-1)/n, nccl-tests' figure: a flat ring's busbw is what each link carries per second, so ring
# reaches at most the link rate; hierarchical sends 1 byte per byte of data across hosts instead
# of the ring's 1.5 at 4 ranks, so its busbw can exceed it.) The hosts are torn down on exit, on
# failure and on Ctrl-C.
#
# Usage: sudo bench/coll_across_hosts.sh [BUILD_DIR]   (default: build; needs BUILD_DIR/bin/tessera)
# Environment: RUNS (3), RATE (1gbit; a tc rate in [kmg]bit), MIN_BYTES (1M), MAX_BYTES (64M),
# FACTOR (4), ITERS (5), WARMUP (2), PORT (29621), LIMIT_S (600 per job), KEEP_LOGS.
# Exit: 0, 1 failure, 77 hosts cannot be made here (not root, ...).
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
tessera=$build/bin/tessera
hosts_sh=$root/scripts/netns-hosts.sh
# shellcheck source=across_hosts_bed.sh
. "$root/bench/across_hosts_bed.sh"
runs=${RUNS:-3}
rate=${RATE:-1gbit}
min_bytes=${MIN_BYTES:-1M}
max_bytes=${MAX_BYTES:-64M}
factor=${FACTOR:-4}
iters=${ITERS:-5}
warmup=${WARMUP:-2}
port=${PORT:-29621}
limit=${LIMIT_S:-600}

[ -x "$tessera" ] || {
  echo "coll_across_hosts.sh: $tessera not found; build it (cmake --build $build --target tessera)" >&2
  exit 1
}
gbps=$(link_gbps coll_across_hosts.sh "$rate") || exit 2

bed_up collb

# run_once ALGO OUT: one bench job with allreduce forced to ALGO; rank 0's JSON to OUT.
run_once() {
  local algo=$1 out=$2 h pids=() code=0
  for h in 0 1; do
    # UCX over TCP on the shaped eth0 between hosts, shared memory inside each. --bind-to none:
    # each launcher sees the machine's CPUs as its own and would pin both hosts' ranks alike.
    bash "$hosts_sh" exec "$name" "$h" env UCX_TLS=tcp UCX_NET_DEVICES=eth0 \
      TESSERA_COLL_ALGO="allreduce:$algo" TESSERA_COLL_TIMEOUT_MS=120000 timeout -s KILL "$limit" \
      "$tessera" launch --nnodes 2 --nproc-per-node 2 --node-rank "$h" --bind-to none \
      --no-tag-output --rdzv-endpoint "10.77.0.1:$port" --rdzv-timeout-s 60 -- \
      "$tessera" bench coll -o allreduce -d float -r sum -b "$min_bytes" -e "$max_bytes" \
      -f "$factor" -n "$iters" -w "$warmup" -c 1 -G 0 --json >"$out.node$h" 2>"$out.err$h" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || code=$?; done
  if [ "$code" -ne 0 ]; then
    echo "coll_across_hosts.sh: a launcher exited with $code ($algo); its output:" >&2
    tail -n 30 "$out".node* "$out".err* >&2
    return 1
  fi
  cp "$out.node0" "$out"
}

echo "# tessera bench coll allreduce across 2 namespace hosts x 2 ranks, link $rate, $min_bytes..$max_bytes" \
  "x$factor, $iters iterations, $runs runs; $(date -u '+%F %H:%M UTC'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= runs; r++)); do
  for algo in ring hierarchical; do
    run_once "$algo" "$work/$algo.$r" || exit 1
  done
  echo "# run $r done at $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
done

python3 - "$gbps" "$work" "$runs" <<'EOF'
import json, statistics, sys
gbps, work, runs = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
link_gBps = gbps / 8  # busbw is in GB/s (bytes)
busbw, times = {}, {}  # (algo, size) -> per run
for algo in ("ring", "hierarchical"):
    for r in range(1, runs + 1):
        j = json.loads(open(f"{work}/{algo}.{r}").read())
        if j["hosts"] != 2 or j["ranks"] != 4:
            sys.exit(f"coll_across_hosts.sh: {algo} run {r} saw {j['ranks']} ranks on {j['hosts']} hosts")
        if j["wrong"]:
            sys.exit(f"coll_across_hosts.sh: {algo} run {r}: {j['wrong']} wrong elements")
        for row in j["rows"]:
            if row["algorithm"] != algo:
                sys.exit(f"coll_across_hosts.sh: {algo} run {r} ran '{row['algorithm']}'")
            busbw.setdefault((algo, row["size_bytes"]), []).append(row["out_of_place"]["busbw_gbps"])
            times.setdefault((algo, row["size_bytes"]), []).append(row["out_of_place"]["time_us"])
print(f"\n## allreduce, 4 ranks on 2 hosts, out of place, medians of {runs} runs (link {gbps:g} Gbit/s = {link_gBps:.3f} GB/s)\n")
print("| size | ring busbw (GB/s), each run | ring median | hierarchical busbw, each run | hierarchical median | hierarchical / ring | ring busbw / link | hierarchical busbw / link |")
print("|---:|---|---:|---|---:|---:|---:|---:|")
for size in sorted({s for _, s in busbw}):
    ring, hier = busbw[("ring", size)], busbw[("hierarchical", size)]
    mr, mh = statistics.median(ring), statistics.median(hier)
    fmt = lambda v: ", ".join(f"{x:.3f}" for x in v)
    print(f"| {size / 2**20:g} MiB | {fmt(ring)} | {mr:.3f} | {fmt(hier)} | {mh:.3f} | {mh / mr:.2f}x | {100 * mr / link_gBps:.0f}% | {100 * mh / link_gBps:.0f}% |")
EOF
