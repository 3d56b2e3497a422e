#!/usr/bin/env bash
# Node loss with --nnodes 1:2 (issue 18): two launchers on this host, two ranks each, train the
# GPT decoder (tessera-train --gpt-config, f32); before step 6 rank 2 SIGKILLs its launcher (node 1
# is lost with both its ranks). Node 0's launcher re-forms the job on its two ranks, the survivors
# re-plan for 2 devices, reshard the snapshot in memory (their own and the replicas they hold of
# ranks 2 and 3) and finish. The final parameters must match a fault-free 4-rank run of the same
# schedule within the parallel tests' tolerance (1e-4 per parameter: f32, another summation
# order after the re-plan).
#
#   node_loss_test.sh BIN_DIR CONFIG WORK_DIR
set -euo pipefail
bin=$1 config=$2 work=$3
py=/usr/bin/python3
[ -x "$py" ] || { echo "SKIP: $py is needed to compare the parameter files"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
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
"$py" - "$work/faulted.bin" "$work/clean.bin" <<'PY'
import struct, sys
def read(path):  # examples/trainer/dump.h
    b = open(path, "rb").read()
    head = b"TSRPARAMS1\n"
    assert b.startswith(head), path + ": not a parameters file"
    i, out = len(head), {}
    while i < len(b):
        (n,) = struct.unpack_from("<I", b, i); i += 4
        name = b[i:i + n].decode(); i += n
        (rank,) = struct.unpack_from("<I", b, i); i += 4
        shape = struct.unpack_from("<%dq" % rank, b, i); i += 8 * rank
        count = 1
        for d in shape: count *= d
        out[name] = struct.unpack_from("<%df" % count, b, i); i += 4 * count
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
assert a.keys() == b.keys(), "different parameters"
worst, where = max((abs(x - y), k) for k in a for x, y in zip(a[k], b[k]))
print("faulted run vs fault-free run: max |diff| %.3g (%s)" % (worst, where))
sys.exit(0 if worst <= 1e-4 else 1)
PY
grep -h "recovered" "$work/node0.log" | sed 's/^/  /' | cut -c1-400
echo "PASS"
