#!/usr/bin/env bash
# Node loss with --nnodes 1:2 (issue 18): two launchers on this host, two ranks each, train the
# GPT decoder (tessera-train --gpt-config, f32); before step 6 rank 2 SIGKILLs its launcher (node 1
# is lost with both its ranks). Node 0's launcher re-forms the job on its two ranks, the survivors
# re-plan for 2 devices, reshard the snapshot in memory (their own and the replicas they hold of
# ranks 2 and 3) and finish. The final parameters must match a fault-free 4-rank run of the same
# schedule within the parallel tests' tolerance (1e-4 per parameter: f32, another summation
# order after the re-plan); `tessera-train --compare` reads the two parameter files.
#
#   node_loss_test.sh BIN_DIR CONFIG WORK_DIR
set -euo pipefail
bin=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
# A port nothing uses now: /proc/net/tcp{,6} list every socket's local port (hex, after the last
# colon of the second column).
used=$(awk '{ n = split($2, a, ":"); print a[n] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null || true)
port=$((20000 + $$ % 20000))
while grep -qx "$(printf '%04X' "$port")" <<<"$used"; do port=$((port + 1)); done
export TESSERA_STORE_TOKEN="node-loss-$$"
launch="--nnodes 1:2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$port --rdzv-timeout-s 30 --timeout-s 90"
train=(--gpt-config "$config" --global-batch 8 --seq 16 --steps 10 --snapshot-every 2 --f32
       --log-every 0)
( timeout -s KILL 150 "$bin/tessera" launch $launch --node-rank 1 -- "$bin/tessera-train" \
    "${train[@]}" --ckpt-dir "$work/ckpt" --params-out "$work/faulted.bin" \
    --kill-rank 2 --kill-step 5 --kill-launcher > "$work/node1.log" 2>&1 || true ) 2>/dev/null &
code=0
timeout -s KILL 150 "$bin/tessera" launch $launch --node-rank 0 -- "$bin/tessera-train" \
  "${train[@]}" --ckpt-dir "$work/ckpt" --params-out "$work/faulted.bin" \
  --kill-rank 2 --kill-step 5 --kill-launcher > "$work/node0.log" 2>&1 || code=$?
wait
fail() { echo "FAIL: $*"; echo "--- node 0:"; tail -40 "$work/node0.log"; exit 1; }
[ "$code" = 0 ] || fail "node 0's launcher exited $code"
grep -q "the job re-forms on 1 of 2 nodes" "$work/node0.log" || fail "no re-form line"
grep -q "rank 0 recovered: .*node lost: re-formed on 2 ranks" "$work/node0.log" ||
  fail "rank 0 did not re-form on 2 ranks"
grep -q "restored step 4 (from memory)" "$work/node0.log" || fail "not restored from memory"
"$bin/tessera" launch -n 4 -- "$bin/tessera-train" "${train[@]}" --ckpt-dir "$work/clean-ckpt" \
  --params-out "$work/clean.bin" > "$work/clean.log" 2>&1 || fail "the fault-free run failed"
"$bin/tessera-train" --compare "$work/faulted.bin" "$work/clean.bin" --tolerance 1e-4 ||
  fail "the faulted run's parameters are not those of the fault-free run (above)"
grep -h "recovered" "$work/node0.log" | sed 's/^/  /' | cut -c1-400
echo "PASS"
