#!/usr/bin/env bash
# `tessera probe --measure` across two emulated hosts (issue 18 §4): one launcher per host with one
# rank each, rendezvous through node 0's store at 10.77.0.1; the UCX bandwidth each direction
# measured must be within 25% of the `tc` rate shaping that host's egress.
#
# Cases:
#   probe_measures_shaped_link   the fixture's hosts (1 Gbit/s each way); --json: both directions
#                                over tcp/eth0, declared figure and fraction beside the measured one
#   probe_measures_each_direction  hosts of its own, host 0 at 1 Gbit/s and host 1 at 300 Mbit/s:
#                                the text table gives each direction its own rate
#
# Usage: probe_test.sh CASE STATE TESSERA
# Exit: 0 pass, 1 fail, 77 skipped (the fixture could not make hosts: not root, ...).
set -u -o pipefail
case_name=${1:?usage: probe_test.sh CASE STATE TESSERA}
state=$2
tessera=$3
here=$(cd "$(dirname "$0")" && pwd)
hosts_sh="$here/../../scripts/netns-hosts.sh"

# shellcheck source=case_support.sh
source "$here/case_support.sh"
require_testbed "$state"

work=$(mktemp -d "${TMPDIR:-/tmp}/tsr-probe-XXXXXX")
pids=()
own_hosts=""
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  [ -z "$own_hosts" ] || bash "$hosts_sh" down "$own_hosts"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# probe HOSTS PORT ARGS...: `tessera probe --measure ARGS` on hosts 0 and 1 of HOSTS, one rank per
# host, node 0 untagged (its stdout is the probe's output); each launcher killed after 90 s.
probe() {
  local hosts=$1 port=$2
  shift 2
  local h tag token="t-$$-$RANDOM$RANDOM"
  for h in 0 1; do
    tag=()
    [ "$h" = 0 ] && tag=(--no-tag-output)
    bash "$hosts_sh" exec "$hosts" "$h" env TESSERA_STORE_TOKEN="$token" \
      timeout -s KILL 90 "$tessera" launch --nnodes 2 --nproc-per-node 1 --node-rank "$h" \
      --rdzv-endpoint "10.77.0.1:$port" --rdzv-timeout-s 30 "${tag[@]}" -- \
      "$tessera" probe --measure "$@" >"$work/node$h.out" 2>"$work/node$h.err" &
    pids+=($!)
  done
  wait "${pids[0]}"; code0=$?
  wait "${pids[1]}"; code1=$?
  pids=()
  [ "$code0" -eq 0 ] && [ "$code1" -eq 0 ] || fail "launchers exited $code0 and $code1"
}

# within_25 WHAT MEASURED_GBPS RATE_MBIT: fails unless MEASURED is within 25% of the tc rate.
within_25() {
  local verdict
  verdict=$(awk -v m="$2" -v r="$3" 'BEGIN {
    mbit = m * 8000; printf "%.0f Mbit/s = %.0f%% of the %d Mbit/s tc rate", mbit, 100 * mbit / r, r
    if (mbit < 0.75 * r || mbit > 1.25 * r) print " OUT"; else print "" }')
  echo "$1: $verdict"
  case "$verdict" in *OUT) fail "$1 is not within 25% of the tc rate" ;; esac
}

case "$case_name" in
  probe_measures_shaped_link)
    # The fixture's hosts: each egress shaped at 1 Gbit/s (fixture.sh).
    probe "$name" 29420 --json
    json="$work/node0.out"
    grep -qF '"network_links": [' "$json" || fail "no network_links in the JSON"
    # A replayable topology rides along, its tcp/eth0 transport measured.
    grep -qF '"topology": {' "$json" || fail "no topology in the JSON"
    [ "$(grep -cF '"transport": "tcp/eth0"' "$json")" -eq 2 ] || fail "not 2 links over tcp/eth0"
    grep -qF '"from_host": "'"$name"'-h1"' "$json" || fail "no link from host 1"
    grep -q '"fraction_of_declared": [0-9]' "$json" || fail "no fraction of the declared figure"
    mapfile -t measured < <(grep -o '"measured_bandwidth_gbps": [0-9.e+-]*' "$json" |
      head -n 2 | awk '{print $2}')
    [ "${#measured[@]}" -eq 2 ] || fail "expected 2 measured bandwidths, got ${#measured[@]}"
    within_25 "h0 -> h1" "${measured[0]}" 1000
    within_25 "h1 -> h0" "${measured[1]}" 1000
    grep -q '"measured_latency_us": [0-9]' "$json" || fail "no measured latency"
    echo "PASS: UCX between 2 hosts measured within 25% of the 1 Gbit/s tc rate both ways"
    ;;

  probe_measures_each_direction)
    own_hosts="p$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
    bash "$hosts_sh" up "$own_hosts" --hosts 2 --rate 1gbit || fail "cannot make hosts"
    # Host 1 sends slower: its egress re-shaped (replace: netem or tbf, whichever `up` used).
    ip netns exec "tsr-$own_hosts-h1" tc qdisc replace dev eth0 root tbf rate 300mbit \
      burst 512kb latency 20ms || fail "cannot re-shape host 1"
    probe "$own_hosts" 29421
    out="$work/node0.out"
    cat "$out" | grep -F ' over '
    line01=$(grep -F "$own_hosts-h0 -> $own_hosts-h1 over " "$out") || fail "no h0 -> h1 line"
    line10=$(grep -F "$own_hosts-h1 -> $own_hosts-h0 over " "$out") || fail "no h1 -> h0 line"
    gbps() { echo "$1" | sed -n 's/.* over [^ ]*: \([0-9.e+-]*\) GB\/s.*/\1/p'; }
    within_25 "h0 -> h1" "$(gbps "$line01")" 1000
    within_25 "h1 -> h0" "$(gbps "$line10")" 300
    case "$line01" in *"declared "*" GB/s, "*"%)"*) ;; *) fail "no declared figure: $line01" ;; esac
    echo "PASS: each direction measured at its own tc rate (1 Gbit/s and 300 Mbit/s)"
    ;;

  *) echo "FAIL: unknown case '$case_name'"; exit 1 ;;
esac
exit 0
