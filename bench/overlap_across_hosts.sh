#!/usr/bin/env bash
# overlap_bench across two emulated hosts (docs/PERFORMANCE.md, "Across two hosts"): brings up two
# namespace hosts joined by a link shaped to RATE (scripts/netns-hosts.sh), starts one
# `tessera launch` per host (one rank each, so every gradient byte crosses the link), and runs
# overlap_bench RUNS times. Each run measures every variant in turn (no overlap, the plain engine,
# the engine with bf16, top-k and PowerSGD), so the variants interleave across runs. Prints, per
# comm/compute ratio and variant: the step time of each run and their median, the median of the
# per-run speed-up against the plain engine, the bytes each rank puts on the link per step, and the
# wire rate (those bytes / step time) as a fraction of RATE. The hosts are torn down on exit, on
# failure and on Ctrl-C.
#
# Usage: sudo bench/overlap_across_hosts.sh [BUILD_DIR]   (default: build; needs BUILD_DIR/bin/
#        tessera and BUILD_DIR/bin/overlap_bench)
# Environment: RUNS (3), RATE (1gbit; a tc rate in [kmg]bit), RATIOS (1.0,2.0), HIDDEN (256),
# LAYERS (24), STEPS (5), CODECS (none,bf16,topk,powersgd), PORT (29611), LIMIT_S (900 per run),
# KEEP_LOGS (unset: the logs go with the temporary directory).
# Exit: 0, 1 failure, 77 hosts cannot be made here (not root, ...).
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
tessera=$build/bin/tessera
bench=$build/bin/overlap_bench
hosts_sh=$root/scripts/netns-hosts.sh
# shellcheck source=across_hosts_bed.sh
. "$root/bench/across_hosts_bed.sh"
runs=${RUNS:-3}
rate=${RATE:-1gbit}
ratios=${RATIOS:-1.0,2.0}
hidden=${HIDDEN:-256}
layers=${LAYERS:-24}
steps=${STEPS:-5}
codecs=${CODECS:-none,bf16,topk,powersgd}
port=${PORT:-29611}
limit=${LIMIT_S:-900}

for exe in "$tessera" "$bench"; do
  [ -x "$exe" ] || {
    echo "overlap_across_hosts.sh: $exe not found; build it (cmake --build $build --target tessera overlap_bench)" >&2
    exit 1
  }
done
# The link rate in Gbit/s, for the wire-rate column.
gbps=$(link_gbps overlap_across_hosts.sh "$rate") || exit 2

bed_up ovlb

# run_once OUT: one overlap_bench job, a launcher per host; node 0's output (rank 0) to OUT.
run_once() {
  local out=$1 h pids=() code=0
  for h in 0 1; do
    # UCX over TCP on the shaped eth0 (the hosts share no memory). --bind-to none: each launcher
    # sees the machine's CPUs as its own and would pin both hosts' ranks to the same core.
    bash "$hosts_sh" exec "$name" "$h" env UCX_TLS=tcp UCX_NET_DEVICES=eth0 \
      TESSERA_COLL_TIMEOUT_MS=120000 timeout -s KILL "$limit" \
      "$tessera" launch --nnodes 2 --nproc-per-node 1 --node-rank "$h" --bind-to none \
      --rdzv-endpoint "10.77.0.1:$port" --rdzv-timeout-s 60 -- \
      "$bench" --hidden "$hidden" --layers "$layers" --steps "$steps" --ratios "$ratios" \
      --codecs "$codecs" --link-gbps "$gbps" >"$out.node$h" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || code=$?; done
  if [ "$code" -ne 0 ]; then
    echo "overlap_across_hosts.sh: a launcher exited with $code; its output:" >&2
    tail -n 30 "$out".node* >&2
    return 1
  fi
  grep -o 'RESULT .*' "$out.node0" >"$out"
  grep -q 'hosts=2' "$out" || { echo "overlap_across_hosts.sh: the ranks did not see 2 hosts" >&2; return 1; }
}

echo "# overlap_bench across 2 namespace hosts, link $rate, h=$hidden, $layers layers," \
  "$steps steps, ratios $ratios, $runs runs; $(date -u '+%F %H:%M UTC'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= runs; r++)); do
  run_once "$work/run$r" || exit 1
  echo "# run $r done at $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
  # Rank 0's table of this run, as the bench printed it.
  grep -v RESULT "$work/run$r.node0" | grep -F -e '## ' -e '| ' -e '# standalone' -e '# engine' | sed 's/^\[rank 0\] //'
done

python3 - "$gbps" "$work"/run[0-9]* <<'EOF'
import re, statistics, sys
gbps, files = float(sys.argv[1]), [f for f in sys.argv[2:] if re.search(r"run\d+$", f)]
names = {"no-overlap": "no overlap", "none": "engine (plain)", "bf16": "engine + bf16",
         "topk": "engine + top-k", "powersgd": "engine + PowerSGD"}
rows = {}  # (ratio, variant) -> [(step_ms, wire_bytes, comm_ms)] per run
speedups = {}
for f in sorted(files):
    recs = [dict(kv.split("=") for kv in line.split()[1:]) for line in open(f)]
    plain = {r["ratio"]: float(r["step_ms"]) for r in recs if r["variant"] == "none"}
    for r in recs:
        key = (r["ratio"], r["variant"])
        rows.setdefault(key, []).append((float(r["step_ms"]), float(r["wire_bytes"]), float(r["comm_ms"])))
        if r["ratio"] in plain:
            speedups.setdefault(key, []).append(plain[r["ratio"]] / float(r["step_ms"]))
print(f"\n## medians of {len(files)} runs (link {gbps:g} Gbit/s)\n")
print("| comm/compute | variant | step (ms), each run | median step (ms) | speed-up vs plain engine (median) | wire MB per rank per step | wire rate / link (median) |")
print("|---|---|---|---:|---:|---:|---:|")
for (ratio, variant), vals in rows.items():
    steps = [v[0] for v in vals]
    med = statistics.median(steps)
    wire = statistics.median(v[1] for v in vals)
    frac = statistics.median(v[1] * 8 / (v[0] / 1e3) / (gbps * 1e9) for v in vals)
    sp = statistics.median(speedups.get((ratio, variant), [float("nan")]))
    print(f"| {ratio} | {names.get(variant, variant)} | {', '.join(f'{s:.0f}' for s in steps)} | {med:.0f} | {sp:.2f}x | {wire / 1e6:.2f} | {100 * frac:.0f}% |")
# One standalone allreduce per run (every ratio of a run repeats it).
first = next(iter(rows))[0]
comm = [v[2] for (ratio, variant), vals in rows.items() if variant == "none" and ratio == first for v in vals]
plain_wire = statistics.median(v[1] for (ra, va), vals in rows.items() if va == "none" for v in vals)
print(f"\nstandalone allreduce (per run): {', '.join(f'{c:.0f}' for c in comm)} ms; "
      f"median {statistics.median(comm):.0f} ms = {plain_wire * 8 / (statistics.median(comm) / 1e3) / 1e9:.3f} Gbit/s "
      f"on the wire per rank, {100 * plain_wire * 8 / (statistics.median(comm) / 1e3) / (gbps * 1e9):.0f}% of the link")
EOF
