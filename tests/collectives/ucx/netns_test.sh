#!/usr/bin/env bash
# Two emulated hosts: two network namespaces joined by a veth pair (10.213.0.1/30 and .2, on that
# link only), two ranks in each, a hierarchical allreduce across them over UCX's TCP transport.
# The rendezvous store is hosted by rank 0 on the first namespace's address.
#
# Usage: netns_test.sh <netns_rank binary>
# Exit: 0 pass, 1 fail, 77 skipped (not root, no iproute2, namespaces not permitted).
set -u -o pipefail  # a rank's exit status survives the '| sed' that prefixes its lines

rank_bin=${1:?usage: netns_test.sh <netns_rank binary>}
skip() {
  echo "SKIP: $*"
  exit 77
}

[ "${EUID:-$(id -u)}" -eq 0 ] || skip "creating network namespaces needs root (uid ${EUID:-?})"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2)"

# Names unique to this run, so that concurrent runs (plain and ASan builds) do not collide; veth
# names must fit in 15 characters.
id=$(($$ % 100000))
ns_a="tsr-ucx-a-$id"
ns_b="tsr-ucx-b-$id"
veth_a="tsrua$id"
veth_b="tsrub$id"
addr_a=10.213.0.1
addr_b=10.213.0.2
port=$((20000 + $$ % 10000 * 2))  # this port and the next
pids=()
# A rank that outlives this is killed and fails the test: no hang (the collective timeout is 30 s).
rank_limit=60

cleanup() {
  # The ranks still running in our namespaces (by their pids), then the namespaces themselves.
  for ns in "$ns_a" "$ns_b"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null  # deleting a namespace deletes its end of the veth pair
  ip link del "$veth_a" 2>/dev/null
  true
}
trap cleanup EXIT
trap 'exit 1' INT TERM

err=$(ip netns add "$ns_a" 2>&1) || skip "cannot create a network namespace: $err"
err=$(ip netns add "$ns_b" 2>&1) || skip "cannot create a network namespace: $err"
err=$(ip link add "$veth_a" type veth peer name "$veth_b" 2>&1) || skip "cannot create a veth pair: $err"
err=$(ip netns exec "$ns_a" true 2>&1) || skip "cannot enter a network namespace: $err"
set -e
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add "$addr_a/30" dev "$veth_a"
ip -n "$ns_b" addr add "$addr_b/30" dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up
set +e
echo "namespaces $ns_a ($veth_a $addr_a) and $ns_b ($veth_b $addr_b), store on $addr_a:$port"

# Starts one rank in the background: mode port rank local_rank namespace host_id device.
start_rank() {
  ip netns exec "$5" env RANK="$3" WORLD_SIZE=4 LOCAL_RANK="$4" LOCAL_WORLD_SIZE=2 \
    MASTER_ADDR="$addr_a" MASTER_PORT="$2" TESSERA_HOST_ID="$6" \
    TESSERA_COLL_ALGO=allreduce:hierarchical TESSERA_COLL_TIMEOUT_MS=30000 \
    UCX_TLS=tcp UCX_NET_DEVICES="$7" \
    timeout -s KILL "$rank_limit" "$rank_bin" "$1" 2>&1 | sed -u "s/^/[$1 rank $3] /" &
  pids+=($!)
}

# Runs the four ranks of one mode of netns_rank; fails when any rank fails.
run_phase() {
  local mode=$1 port=$2 status=0
  pids=()
  start_rank "$mode" "$port" 0 0 "$ns_a" emulated-host-a "$veth_a"
  start_rank "$mode" "$port" 1 1 "$ns_a" emulated-host-a "$veth_a"
  start_rank "$mode" "$port" 2 0 "$ns_b" emulated-host-b "$veth_b"
  start_rank "$mode" "$port" 3 1 "$ns_b" emulated-host-b "$veth_b"
  local rank=0 code
  for pid in "${pids[@]}"; do
    wait "$pid"
    code=$?
    if [ "$code" -ne 0 ]; then
      status=1
      if [ "$code" -eq 137 ]; then
        echo "[$mode rank $rank] killed: still running after ${rank_limit} s"
      else
        echo "[$mode rank $rank] exit status $code"
      fi
    fi
    rank=$((rank + 1))
  done
  pids=()
  return "$status"
}

# First the UCX transport alone, then the communicator's hierarchical allreduce on top of it.
if ! run_phase transport "$port"; then
  echo "FAIL: UCX transport exchange across the namespaces (see the rank lines above)"
  exit 1
fi
if ! run_phase communicator "$((port + 1))"; then
  echo "FAIL: hierarchical allreduce across the namespaces (see the rank lines above)"
  exit 1
fi
echo "PASS: UCX transport and hierarchical allreduce across two namespaces over UCX TCP"
exit 0
