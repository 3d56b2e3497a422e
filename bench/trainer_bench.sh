#!/usr/bin/env bash
# The GPT trainer end to end (issue 16 §3), side by side in one run, on the same ranks, model and
# global batch:
#   baseline   pure data parallelism, the dp gradient allreduce after the backward (no overlap),
#              a full synchronous checkpoint (durable before the next step) every K steps;
#   tessera    the planner's plan for these devices (`tessera plan --calibration`, from a
#              calibration of this machine's device), the overlap engine where the trainer runs
#              it with that plan (zero 0, dp > 1, no pp/ep), asynchronous incremental checkpoints
#              every K steps (a full save, then deltas) with the buddy's in-memory replica;
# and the same two without checkpoints (no checkpointer at all), which splits the difference into
# plan and checkpoint. Each configuration runs ROUNDS times, interleaved (round i starts with the
# i-th configuration, so none always follows the same one); the script prints every run's
# tokens/s, the medians, tessera/baseline and the MFU against the calibrated GEMM peak (model
# FLOPs as the planner counts them), and per configuration the step breakdown (medians over the
# rounds):
#   step      the median step time (rank 0), and its MFU: the steps without the checkpoints
#   first     the stall of the run's first snapshot: no save in flight, so the snapshot copy
#             (SaveStart.blocking_s) alone when asynchronous, the whole save when synchronous
#   later     the mean stall of the other snapshots: asynchronous, this adds the wait for the
#             previous save still persisting
#   final     the wait after the last step for the last save to be durable (counted in tokens/s)
#   MB/save   bytes written per save, all ranks ("step N committed" at TESSERA_LOG=info): full
#             saves, and delta saves with their fraction of the full ones
#
#   bench/trainer_bench.sh [BUILD_DIR] [ROUNDS] [K] [STEPS]      (defaults: build 5 5 20)
#   CONFIG=... RANKS=2 GLOBAL_BATCH=8 SEQ=128 bench/trainer_bench.sh
#   CALIBRATION=cal.json bench/trainer_bench.sh   (from `tessera plan --calibrate --calibration-out`
#     taken when the machine was quiet: the plan and the MFU's peak then do not move with the load)
#
# Needs tessera, tessera-gpt-train and the host backend built; /usr/bin/python3 reads the output.
# The machine's load average is printed before and after: the ranks are pinned one per core, and
# anything else running takes from them and from the nice-19 persist threads.
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
every=${3:-5}
steps=${4:-20}
ranks=${RANKS:-2}
config=${CONFIG:-$(dirname "$0")/../examples/trainer/configs/small-llama.json}
global=${GLOBAL_BATCH:-8}
seq=${SEQ:-128}
tessera="$build/bin/tessera"
train="$build/bin/tessera-gpt-train"
py=/usr/bin/python3
export TESSERA_BACKEND_PATH="${TESSERA_BACKEND_PATH:-$build/lib/tessera}"
export TESSERA_HOST_DEVICES="${TESSERA_HOST_DEVICES:-1:discrete}"
export OPENBLAS_NUM_THREADS=1
if ((global % ranks != 0)); then
  echo "trainer_bench: GLOBAL_BATCH $global is not a multiple of RANKS $ranks" >&2
  exit 2
fi
work=$(mktemp -d /tmp/trainer_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

if [ -n "${CALIBRATION:-}" ]; then
  cp "$CALIBRATION" "$work/cal.json"
else
  "$tessera" plan --calibrate --calibration-out "$work/cal.json" > "$work/calibrate.txt" 2>&1
fi
"$tessera" plan --model "$config" --calibration "$work/cal.json" --devices "$ranks" \
  --global-batch "$global" --seq-len "$seq" --json > "$work/plan.json"
# The plan's flags for tessera-gpt-train; the GEMM peak and the planner's FLOPs per token.
read -r plan_flags overlap summary peak flops_per_token < <("$py" - "$work/plan.json" "$work/cal.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["plans"][0]
cal = json.load(open(sys.argv[2]))
flags = "--tp {tp} --pp {pp} --dp {dp} --ep {ep} --zero {zero} --micro-batch {mbs} " \
        "--micro-batches {num_microbatches} --recompute {recompute}".format(**plan)
overlap = "--overlap" if plan["zero"] == 0 and plan["dp"] > 1 and plan["pp"] == 1 and plan["ep"] == 1 else "-"
devices = plan["tp"] * plan["pp"] * plan["dp"]
per_token = plan["model_tflops_per_device"] * 1e12 * devices / plan["tokens_per_s"]
peak = cal["fit"]["peak_tflops"] * 1e12  # the calibration's f32 GEMM fit
print(flags.replace(" ", ","), overlap, plan["summary"].replace(" ", ","), peak, per_token)
PY
)
if [ -z "${flops_per_token:-}" ]; then
  echo "trainer_bench: could not read the plan ($work/plan.json)" >&2
  exit 1
fi
plan_flags=${plan_flags//,/ }
[ "$overlap" = "-" ] && overlap=""
common=(--config "$config" --steps "$steps" --seq "$seq" --json-summary --act bf16)
baseline=(--dp "$ranks" --micro-batch $((global / ranks)) --micro-batches 1)
ckpt_base=(--snapshot-every "$every" --full-every 1 --ckpt-sync)
ckpt_tessera=(--snapshot-every "$every" --full-every 4 --peer-replica)

# One run's output -> "tokens_per_s step_s first_ms later_ms final_ms full_MB delta_MB
# tokens_per_step" ("-" where it has none).
cat > "$work/parse.py" <<'PY'
import json, re, sys
summary, stalls, saves = None, [], {}
for line in open(sys.argv[1]):
    m = re.match(r"\[rank \d+\] ?(.*)", line)
    line = m.group(1) if m else line
    if line.startswith("{\"summary\""):
        summary = json.loads(line)
    m = re.match(r"step \d+ loss .* snapshot stall ([0-9.]+) ms", line)
    if m:
        stalls.append(float(m.group(1)))
    m = re.search(r"step (\d+) committed: (\d+) bytes written \((delta|full)\)", line)
    if m:  # one line per rank and save: the save's bytes are their sum
        kind, total = saves.get(m.group(1), (m.group(3), 0))
        saves[m.group(1)] = (kind, total + int(m.group(2)))
if summary is None:
    sys.exit("no summary line")
def mean(v): return "%.1f" % (sum(v) / len(v)) if v else "-"
full = [b / 1e6 for k, b in saves.values() if k == "full"]
delta = [b / 1e6 for k, b in saves.values() if k == "delta"]
final = max(summary["snapshot_stall_s"] * 1e3 - sum(stalls), 0.0)  # the step lines round
print(summary["tokens_per_s"], summary["step_s_median"], stalls[0] if stalls else "-",
      mean(stalls[1:]), "%.1f" % final if stalls else "-", mean(full), mean(delta),
      summary["tokens_per_step"])
PY

run() {  # NAME ARGS...: one run; prints parse.py's fields, or "failed" (and the log's tail)
  local name=$1; shift
  local dir=()
  # Only the checkpointing configurations get a directory (and so a checkpointer at all).
  if [[ " $* " == *" --snapshot-every "* ]]; then
    rm -rf "$work/ck-$name"
    dir=(--ckpt-dir "$work/ck-$name")
  fi
  if ! TESSERA_LOG=info TESSERA_LOG_SUBSYS=ckpt "$tessera" launch -n "$ranks" -- "$train" \
      "${common[@]}" "${dir[@]}" "$@" > "$work/$name.out" 2>&1 ||
     ! "$py" "$work/parse.py" "$work/$name.out" 2> "$work/$name.parse"; then
    { echo "trainer_bench: $name failed:"; tail -n 5 "$work/$name".{out,parse} 2> /dev/null; } >&2 ||
      true
    echo failed
  fi
}

names=(baseline tessera baseline-nockpt tessera-nockpt)
declare -A args=([baseline]="${baseline[*]} ${ckpt_base[*]}"
                 [tessera]="$plan_flags $overlap ${ckpt_tessera[*]}"
                 [baseline-nockpt]="${baseline[*]}" [tessera-nockpt]="$plan_flags $overlap")
fields=(tps step first later final full delta tokens)
declare -A col  # "$name.$field" -> the rounds' values
for ((i = 0; i < rounds; i++)); do
  for ((j = 0; j < ${#names[@]}; j++)); do
    n=${names[(i + j) % ${#names[@]}]}
    # shellcheck disable=SC2086  # the arguments are words
    read -r "${fields[@]}" < <(run "$n" ${args[$n]}) || true
    for f in "${fields[@]}"; do col[$n.$f]+=" ${!f:-failed}"; done
  done
done

median() {  # the median of the numbers among the words read; n/a when there are none
  tr ' ' '\n' | { grep -E '^-?[0-9.]+(e[-+]?[0-9]+)?$' || true; } | sort -g | awk '{ v[NR] = $1 } END {
  if (NR == 0) { print "n/a"; exit } print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mfu() {  # tokens/s -> MFU against the calibrated peak of all ranks
  awk -v t="$1" -v f="$flops_per_token" -v p="$peak" -v r="$ranks" 'BEGIN {
    if (t == "n/a" || p == 0) print "n/a"; else printf "%.1f%%", 100 * t * f / (p * r) }'
}

echo "# trainer_bench $(date -u '+%F %H:%M') UTC: $(basename "$config"), $ranks ranks, global batch $global x $seq tokens, $steps steps, checkpoint every $every, $rounds rounds"
echo "# load average before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
echo "# planner's plan: ${summary//,/ }; tessera flags: $plan_flags $overlap"
echo "# calibration: ${CALIBRATION:-measured now}"
echo "# calibrated GEMM peak $(awk -v p="$peak" 'BEGIN { printf "%.1f", p / 1e9 }') GFLOP/s per device; $(awk -v f="$flops_per_token" 'BEGIN { printf "%.3g", f }') model FLOPs per token (planner)"
tokens=$(echo "${col[baseline.tokens]} ${col[tessera.tokens]}" | tr ' ' '\n' | { grep -E '^[0-9]' || true; } | sort -u)
if [ "$(echo "$tokens" | wc -l)" -gt 1 ]; then
  echo "# WARNING: the configurations ran different tokens per step: ${tokens//$'\n'/ }"
fi
declare -A med
for n in "${names[@]}"; do
  for f in "${fields[@]}"; do med[$n.$f]=$(echo "${col[$n.$f]}" | median); done
  m=${med[$n.tps]}
  printf '%-16s median %8s tokens/s  MFU %6s  runs:%s\n' "$n" "$m" "$(mfu "$m")" "${col[$n.tps]}"
done
echo "# step breakdown (medians over the rounds; ms; MB/save summed over the ranks)"
printf '%-16s %8s %9s %9s %9s %9s %9s %16s\n' config step step-MFU first later final "full MB" "delta MB (/full)"
for n in "${names[@]}"; do
  s=${med[$n.step]}
  step_tps=$(awk -v s="$s" -v t="${med[$n.tokens]}" 'BEGIN { if (s == "n/a" || s == 0) print "n/a"; else print t / s }')
  frac=$(awk -v d="${med[$n.delta]}" -v f="${med[$n.full]}" 'BEGIN {
    if (d == "n/a" || f == "n/a" || f == 0) print ""; else printf " (%.2f)", d / f }')
  [ "${med[$n.delta]}" = "n/a" ] && med[$n.delta]="-"
  printf '%-16s %8s %9s %9s %9s %9s %9s %16s\n' "$n" \
    "$(awk -v s="$s" 'BEGIN { if (s == "n/a") print s; else printf "%.1f", s * 1e3 }')" \
    "$(mfu "$step_tps")" "${med[$n.first]}" "${med[$n.later]}" "${med[$n.final]}" \
    "${med[$n.full]}" "${med[$n.delta]}$frac"
done
b=${med[baseline.tps]}; t=${med[tessera.tps]}; bn=${med[baseline-nockpt.tps]}; tn=${med[tessera-nockpt.tps]}
awk -v b="$b" -v t="$t" -v bn="$bn" -v tn="$tn" 'BEGIN {
  if (b == "n/a" || t == "n/a" || bn == "n/a" || tn == "n/a") exit
  printf "tessera / baseline = %.2fx (plan alone, no checkpoints: %.2fx; checkpoints cost the baseline %.0f%%, tessera %.0f%%)\n",
    t / b, tn / bn, 100 * (1 - b / bn), 100 * (1 - t / tn) }'
