#!/usr/bin/env bash
# `tessera launch` across two emulated hosts (the fixture's namespaces, fixture.sh): one launcher
# per host, node rank 0 on host 0 hosting the store at 10.77.0.1, two ranks per host.
#
# Cases:
#   allreduce_across_hosts         the hierarchical allreduce rank of the UCX netns test
#                                  (tessera_coll_netns_rank communicator) runs on 4 ranks over 2
#                                  hosts; the job token comes from a token file node 0 writes
#   rank_failure_stops_every_host  rank 3 (host 1) exits 3: both launchers stop their ranks and
#                                  exit 3, host 0 naming the failed rank
#   store_refuses_strangers        while node 0 waits for node 1, a launcher with a wrong token,
#                                  a hello without a token, raw garbage, half and oversized
#                                  messages and idle connections reach the store from host 1;
#                                  each is refused (node 0 logs it) and the real node 1 then
#                                  completes the job (tessera_bootstrap_probe on 4 ranks)
#   abort_reaches_every_host       ranks allreduce in a loop; rank 3 (host 1) is killed with
#                                  SIGKILL: both ranks of host 0 fail naming rank 3, and the test
#                                  prints how long after the kill (bound: the issue's 5 s)
#   host_loss_fails_survivors      ranks allreduce in a loop; host 1's link is cut (its bridge
#                                  port down, no packet and no reset gets through): node 0's
#                                  launcher finds node 1 silent (10 s) and host 0's ranks fail
#                                  within their collective timeout (20 s here), naming the
#                                  operation and the lost node
#   tuner_picks_hierarchical       without TESSERA_COLL_ALGO, the tuner of the world communicator
#                                  (2 hosts x 2 ranks) chooses hierarchical allreduce at 4 MiB
#   bench_coll_across_hosts        `tessera bench coll` allreduce on 2 hosts x 2 ranks: the table
#                                  says 2 hosts, lists the ranks on both host names, checks the
#                                  results; its bus bandwidth is printed beside the link's rate
#   node_loss_replans_trainer      --nnodes 1:2, tessera-train trains the GPT decoder on 2 hosts x
#                                  2 ranks; before step 6 rank 2 kills host 1's launcher (the whole
#                                  node): host 0's launcher re-forms the job on its 2 ranks, which
#                                  re-plan for 2 devices, take the lost ranks' state from the
#                                  replicas they hold in memory (the buddy lives on the other host)
#                                  and finish; host 0's launcher exits 0
#
# Usage: launch_test.sh CASE STATE TESSERA NETNS_RANK PROBE MULTINODE_RANK
# Exit: 0 pass, 1 fail, 77 skipped (the fixture could not make hosts: not root, ...).
set -u -o pipefail
case_name=${1:?usage: launch_test.sh CASE STATE TESSERA NETNS_RANK PROBE}
state=$2
tessera=$3
netns_rank=$4
probe=$5
multinode_rank=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
hosts_sh="$here/../../scripts/netns-hosts.sh"

# shellcheck source=case_support.sh
source "$here/case_support.sh"
require_testbed "$state"

work=$(mktemp -d "${TMPDIR:-/tmp}/tsr-multinode-XXXXXX")
pids=()
link_cut=""
cleanup() {
  [ -z "$link_cut" ] || ip -n "tsr-$name-br" link set h1 up
  # Each pid is a `timeout`, which passes SIGTERM on to its launcher (that stops its ranks); the
  # fixture's cleanup kills whatever still runs on the hosts.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Every launcher is bounded: one still running after this is killed (and the test fails).
limit=30
endpoint=10.77.0.1
# Each case its own port: the cases share the fixture's hosts and may run at once.
case "$case_name" in
  allreduce_across_hosts) port=29401 ;;
  rank_failure_stops_every_host) port=29402 ;;
  store_refuses_strangers) port=29403 ;;
  abort_reaches_every_host) port=29404 ;;
  host_loss_fails_survivors) port=29405 ;;
  tuner_picks_hierarchical) port=29406 ;;
  bench_coll_across_hosts) port=29407 ;;
  node_loss_replans_trainer) port=29408 ;;
  *) echo "FAIL: unknown case '$case_name'"; exit 1 ;;
esac

# on_host H VAR=VALUE... -- CMD...: CMD on host H with extra environment, bounded by $limit.
on_host() {
  local h=$1
  shift
  local vars=()
  while [ "$1" != -- ]; do
    vars+=("$1")
    shift
  done
  shift
  bash "$hosts_sh" exec "$name" "$h" env "${vars[@]}" timeout -s KILL "$limit" "$@"
}

# launcher H OUT VAR=VALUE... -- CMD...: the launcher of node rank H on host H in the background,
# stdout and stderr to OUT.out / OUT.err; its pid is appended to pids.
launcher() {
  local h=$1 out=$2
  shift 2
  local vars=()
  while [ "$1" != -- ]; do
    vars+=("$1")
    shift
  done
  shift
  # A simple command, not a function: its pid becomes, exec by exec, the `timeout` process.
  bash "$hosts_sh" exec "$name" "$h" env "${vars[@]}" timeout -s KILL "$limit" \
    "$tessera" launch --nnodes "${nnodes:-2}" --nproc-per-node 2 --node-rank "$h" \
    --rdzv-endpoint "$endpoint:$port" --rdzv-timeout-s 20 "$@" >"$out.out" 2>"$out.err" &
  pids+=($!)
}

now_ms() { date +%s%3N; }

# Waits (at most 30 s) until the 4 ranks print that their allreduce loop runs.
await_looping() {
  for _ in $(seq 300); do
    [ "$(cat "$work"/node*.out 2>/dev/null | grep -c ': pid [0-9]* looping')" -ge 4 ] && return
    sleep 0.1
  done
  fail "the ranks did not all start looping"
}

# failed_after RANK FILE SINCE_MS: how many ms after SINCE_MS rank RANK reported its failure in
# FILE; its failure line goes to the variable `line`.
failed_after() {
  line=$(grep -m1 -F "[rank $1] multinode rank $1: FAILED at " "$2") ||
    fail "rank $1 reported no failure"
  local at=${line#*FAILED at }
  at=${at%%:*}
  echo "rank $1 failed $((at - $3)) ms after: ${line#*FAILED at *: }"
  took=$((at - $3))
}

case "$case_name" in
  allreduce_across_hosts)
    common=(TESSERA_COLL_ALGO=allreduce:hierarchical TESSERA_COLL_TIMEOUT_MS=20000 UCX_TLS=tcp
            UCX_NET_DEVICES=eth0)
    launcher 0 "$work/node0" "${common[@]}" -- --rdzv-token-file "$work/token" \
      -- "$netns_rank" communicator
    launcher 1 "$work/node1" "${common[@]}" -- --rdzv-token-file "$work/token" \
      -- "$netns_rank" communicator
    wait "${pids[0]}"; code0=$?
    wait "${pids[1]}"; code1=$?
    pids=()
    [ "$code0" -eq 0 ] && [ "$code1" -eq 0 ] || fail "launchers exited $code0 and $code1"
    for r in 0 1; do expect_in "$work/node0.out" "[rank $r] netns rank $r (host 0 of 2"; done
    for r in 2 3; do expect_in "$work/node1.out" "[rank $r] netns rank $r (host 1 of 2"; done
    expect_in "$work/node1.err" "node rank 1 of 2 joined the job at $endpoint:$port (ranks 2..3 of 4)"
    [ "$(stat -c %a "$work/token")" = 600 ] || fail "the token file is not mode 0600"
    echo "PASS: 4 ranks on 2 hosts, hierarchical allreduce through a token-guarded store"
    ;;

  rank_failure_stops_every_host)
    export TESSERA_STORE_TOKEN="t-$$-$RANDOM"
    rank_cmd='if [ "$RANK" = 3 ]; then sleep 1; exit 3; fi; exec sleep 25'
    start=$(date +%s)
    launcher 0 "$work/node0" TESSERA_STORE_TOKEN="$TESSERA_STORE_TOKEN" -- -- sh -c "$rank_cmd"
    launcher 1 "$work/node1" TESSERA_STORE_TOKEN="$TESSERA_STORE_TOKEN" -- -- sh -c "$rank_cmd"
    wait "${pids[0]}"; code0=$?
    wait "${pids[1]}"; code1=$?
    pids=()
    took=$(($(date +%s) - start))
    [ "$code0" -eq 3 ] && [ "$code1" -eq 3 ] || fail "launchers exited $code0 and $code1, not 3"
    # Not a timing assertion: the sleeping ranks would have run 25 s, the launchers' limit is 30.
    [ "$took" -lt 20 ] || fail "the job took $took s: the failure did not stop the other host"
    expect_in "$work/node1.err" "rank 3 exited with code 3"
    expect_in "$work/node0.err" "the job failed on node rank 1: rank 3 exited with code 3"
    echo "PASS: a rank failing on host 1 stopped both hosts (exit 3 on each, $took s)"
    ;;

  store_refuses_strangers)
    token="right-$$-$RANDOM"
    launcher 0 "$work/node0" TESSERA_STORE_TOKEN="$token" TESSERA_LOG=warn -- -- "$probe"
    # Strangers from host 1, once the store listens (bounded wait).
    for _ in $(seq 100); do
      on_host 1 -- bash -c "exec 3<>/dev/tcp/$endpoint/$port" 2>/dev/null && break
      sleep 0.1
    done
    launcher 1 "$work/wrong" TESSERA_STORE_TOKEN=wrong -- -- "$probe"
    wait "${pids[1]}"; wrong=$?
    pids=("${pids[0]}")
    [ "$wrong" -ne 0 ] || fail "a launcher with a wrong token joined"
    expect_in "$work/wrong.err" "refused"
    # Raw clients, each on its own connection: garbage, half a hello, an oversized frame, a hello
    # with no token, an idle connection, a set without a hello, then 50 connections in turn.
    on_host 1 -- bash -c "
      exec 3<>/dev/tcp/$endpoint/$port; printf 'GET / HTTP/1.1\r\n\r\n' >&3
      exec 4<>/dev/tcp/$endpoint/$port; printf '\x20\x00\x00\x00\x04\x10' >&4
      exec 5<>/dev/tcp/$endpoint/$port; printf '\xff\xff\xff\x0f' >&5
      exec 6<>/dev/tcp/$endpoint/$port
      exec 9<>/dev/tcp/$endpoint/$port; printf '\x05\x00\x00\x00\x04\x00\x00\x00\x00' >&9
      exec 7<>/dev/tcp/$endpoint/$port; printf '\x0b\x00\x00\x00\x01\x01\x00\x00\x00kvalue' >&7
      for i in \$(seq 50); do exec 8<>/dev/tcp/$endpoint/$port; done
      sleep 1" || fail "the raw clients could not connect"
    launcher 1 "$work/node1" TESSERA_STORE_TOKEN="$token" -- -- "$probe"
    wait "${pids[0]}"; code0=$?
    wait "${pids[1]}"; code1=$?
    pids=()
    [ "$code0" -eq 0 ] && [ "$code1" -eq 0 ] || fail "launchers exited $code0 and $code1"
    for r in 0 1; do expect_in "$work/node0.out" "[rank $r] rank $r of 4 (tessera): 0,1,2,3"; done
    for r in 2 3; do expect_in "$work/node1.out" "[rank $r] rank $r of 4 (tessera): 0,1,2,3"; done
    expect_in "$work/node0.err" "refused the connection from 10.77.0.2"
    expect_in "$work/node0.err" "a wrong token"
    expect_in "$work/node0.err" "an empty token"
    expect_in "$work/node0.err" "a request before the hello"
    echo "PASS: strangers refused, the job completed on 4 ranks over 2 hosts"
    ;;

  abort_reaches_every_host)
    # A long collective timeout: a rank that fails within seconds learned of the death, it did
    # not time out.
    common=(TESSERA_STORE_TOKEN="t-$$-$RANDOM" TESSERA_COLL_TIMEOUT_MS=60000 UCX_TLS=tcp
            UCX_NET_DEVICES=eth0)
    launcher 0 "$work/node0" "${common[@]}" -- -- "$multinode_rank" loop
    launcher 1 "$work/node1" "${common[@]}" -- -- "$multinode_rank" loop
    await_looping
    victim=$(grep -o 'rank 3: pid [0-9]*' "$work/node1.out" | grep -o '[0-9]*$')
    [ -n "$victim" ] || fail "rank 3 printed no pid"
    killed_at=$(now_ms)
    kill -KILL "$victim"
    wait "${pids[0]}"; code0=$?
    wait "${pids[1]}"; code1=$?
    pids=()
    [ "$code0" -ne 0 ] && [ "$code1" -ne 0 ] || fail "launchers exited $code0 and $code1"
    expect_in "$work/node1.err" "rank 3 killed by signal 9 (SIGKILL)"
    worst=0
    for r in 0 1; do
      failed_after "$r" "$work/node0.err" "$killed_at"
      case "$line" in *"rank 3"*) ;; *) fail "rank $r's error does not name rank 3: $line" ;; esac
      case "$line" in *allreduce*) ;; *) fail "rank $r's error does not name the operation" ;; esac
      [ "$took" -gt "$worst" ] && worst=$took
    done
    # The issue's bound; the notice path takes a few hundred ms, so 5 s holds under load.
    [ "$worst" -lt 5000 ] || fail "host 0's ranks learned of rank 3's death only after $worst ms"
    echo "PASS: rank 3 killed on host 1; both ranks of host 0 failed naming it within $worst ms"
    ;;

  host_loss_fails_survivors)
    # Node 0 waits 10 s for the silent node once more after its own ranks are gone.
    limit=45
    common=(TESSERA_STORE_TOKEN="t-$$-$RANDOM" TESSERA_COLL_TIMEOUT_MS=20000 UCX_TLS=tcp
            UCX_NET_DEVICES=eth0)
    launcher 0 "$work/node0" "${common[@]}" -- -- "$multinode_rank" loop
    launcher 1 "$work/node1" "${common[@]}" -- -- "$multinode_rank" loop
    await_looping
    cut_at=$(now_ms)
    link_cut=1
    ip -n "tsr-$name-br" link set h1 down || fail "cannot cut host 1's link"
    wait "${pids[0]}"; code0=$?
    ip -n "tsr-$name-br" link set h1 up
    link_cut=""
    wait "${pids[1]}"; code1=$?
    pids=()
    [ "$code0" -ne 0 ] || fail "host 0's launcher exited 0 after host 1 was cut off"
    worst=0
    for r in 0 1; do
      failed_after "$r" "$work/node0.err" "$cut_at"
      case "$line" in *"node rank 1"*"stopped answering"*) ;;
        *) fail "rank $r's error does not name the lost node: $line" ;; esac
      case "$line" in *allreduce*) ;; *) fail "rank $r's error does not name the operation" ;; esac
      [ "$took" -gt "$worst" ] && worst=$took
    done
    # The collective timeout (20 s) bounds it; the launcher's notice comes after its 10 s.
    [ "$worst" -lt 20000 ] || fail "host 0's ranks failed only $worst ms after the cut"
    expect_in "$work/node0.err" "node rank 1 ("
    echo "PASS: host 1 cut off; host 0's ranks failed naming it within $worst ms (timeout 20000 ms)"
    ;;

  node_loss_replans_trainer)
    # Node 0 notices the silent node after 10 s; the trainer's steps take well under a second.
    limit=80
    nnodes=1:2
    common=(TESSERA_STORE_TOKEN="t-$$-$RANDOM" TESSERA_COLL_TIMEOUT_MS=20000 UCX_TLS=tcp
            UCX_NET_DEVICES=eth0)
    train=("$(dirname "$tessera")/tessera-train"
           --gpt-config "$here/../../examples/trainer/configs/tiny-llama.json" --global-batch 8
           --seq 16 --steps 10 --snapshot-every 2 --f32 --log-every 0 --ckpt-dir "$work/ckpt"
           --kill-rank 2 --kill-step 5 --kill-launcher)
    launcher 0 "$work/node0" "${common[@]}" -- -- "${train[@]}"
    launcher 1 "$work/node1" "${common[@]}" -- -- "${train[@]}"
    wait "${pids[0]}"; code0=$?
    wait "${pids[1]}"
    pids=()
    [ "$code0" -eq 0 ] || { tail -30 "$work/node0.out" "$work/node0.err"; fail "host 0's launcher exited $code0"; }
    expect_in "$work/node0.err" "the job re-forms on 1 of 2 nodes"
    for r in 0 1; do
      expect_in "$work/node0.out" "[rank $r] rank $r recovered: "
    done
    expect_in "$work/node0.out" "node lost: re-formed on 2 ranks"
    expect_in "$work/node0.out" "restored step 4 (from memory)"
    expect_in "$work/node0.out" "final parameters checksum"
    echo "PASS: host 1 lost before step 6; host 0 re-formed, re-planned and finished:"
    grep -m1 -o "node lost: re-formed on 2 ranks, [^(]*" "$work/node0.out"
    ;;

  tuner_picks_hierarchical)
    common=(TESSERA_STORE_TOKEN="t-$$-$RANDOM" TESSERA_COLL_TIMEOUT_MS=20000 UCX_TLS=tcp
            UCX_NET_DEVICES=eth0 TESSERA_COLL_ALGO=)
    launcher 0 "$work/node0" "${common[@]}" -- -- "$multinode_rank" tuner
    launcher 1 "$work/node1" "${common[@]}" -- -- "$multinode_rank" tuner
    wait "${pids[0]}"; code0=$?
    wait "${pids[1]}"; code1=$?
    pids=()
    [ "$code0" -eq 0 ] && [ "$code1" -eq 0 ] || fail "launchers exited $code0 and $code1"
    cat "$work"/node*.out | grep -F 'allreduce' | sort
    for r in 0 1; do expect_in "$work/node0.out" "rank $r: allreduce 4194304 bytes -> hierarchical"; done
    for r in 2 3; do expect_in "$work/node1.out" "rank $r: allreduce 4194304 bytes -> hierarchical"; done
    echo "PASS: the tuner chose hierarchical allreduce across 2 hosts on its own"
    ;;

  bench_coll_across_hosts)
    common=(TESSERA_STORE_TOKEN="t-$$-$RANDOM" TESSERA_COLL_TIMEOUT_MS=20000 UCX_TLS=tcp
            UCX_NET_DEVICES=eth0)
    bench=("$tessera" bench coll -o allreduce -b 1M -e 4M -f 4 -n 5 -w 2 -c 1 --memory host)
    launcher 0 "$work/node0" "${common[@]}" -- -- "${bench[@]}"
    launcher 1 "$work/node1" "${common[@]}" -- -- "${bench[@]}"
    wait "${pids[0]}"; code0=$?
    wait "${pids[1]}"; code1=$?
    pids=()
    [ "$code0" -eq 0 ] && [ "$code1" -eq 0 ] || fail "launchers exited $code0 and $code1"
    grep -F '[rank 0] #' "$work/node0.out" | sed 's/^\[rank 0\] //'
    expect_in "$work/node0.out" "nRanks 4 nHosts 2"
    for h in 0 1; do expect_in "$work/node0.out" " on $name-h$h "; done
    expect_in "$work/node0.out" "Out of bounds values : 0 OK"
    busbw=$(grep -F 'Avg bus bandwidth' "$work/node0.out" | grep -o '[0-9.e+-]*[[:space:]]*$' | tr -d ' ')
    echo "PASS: bench coll across 2 hosts: hosts column right, avg busbw $busbw GB/s over a 1 Gbit/s (0.125 GB/s) link"
    ;;
esac
exit 0
