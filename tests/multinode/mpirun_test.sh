#!/usr/bin/env bash
# OpenMPI's mpirun across two emulated hosts (the fixture's namespaces, fixture.sh): mpirun runs on
# host 0 and reaches host 1 without ssh, through its rsh launcher's agent (mpirun_agent.sh); the
# hostfile names the hosts by address, 2 slots each. OpenMPI's own traffic stays on eth0.
#
# Case mpirun_across_hosts, two jobs of 4 ranks, 2 per host, bootstrapped from OMPI_COMM_WORLD_*
# with the exchange through mpirun's PMIx servers:
#   `tessera bench coll` allreduce: says launcher openmpi, 4 ranks on 2 hosts, ranks 0,1 on
#   host 0 and 2,3 on host 1, and its results check out;
#   tessera_multinode_rank tuner, ranks placed round-robin (0,2 on host 0, 1,3 on host 1, as
#   `--map-by node` does): every rank's tuner picks hierarchical allreduce at 4 MiB (which needs
#   the 2 hosts and the local ranks right) and each rank checks its allreduce results.
#
# Usage: mpirun_test.sh STATE TESSERA MULTINODE_RANK PMIX
#   PMIX: yes when Tessera was built with PMIx (without it mpirun's ranks cannot bootstrap).
# Exit: 0 pass, 1 fail, 77 skipped (not root, no mpirun, no PMIx, or the fixture made no hosts).
set -u -o pipefail
state=${1:?usage: mpirun_test.sh STATE TESSERA MULTINODE_RANK PMIX}
tessera=$2
multinode_rank=$3
pmix=$4
here=$(cd "$(dirname "$0")" && pwd)
hosts_sh="$here/../../scripts/netns-hosts.sh"

# shellcheck source=case_support.sh
source "$here/case_support.sh"
require_testbed "$state"
mpirun=$(command -v mpirun) || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
[ "$pmix" = yes ] || { echo "SKIP: Tessera was built without PMIx (libpmix-dev)"; exit 77; }
[ "${EUID:-$(id -u)}" -eq 0 ] || { echo "SKIP: the emulated hosts need root"; exit 77; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tsr-multinode-mpirun-XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$work/hosts"

# Every mpirun is bounded: one still running after this gets SIGTERM (and the test fails), so it
# can stop its ranks and host 1's daemon; SIGKILL 5 s later if it has not; the fixture's cleanup
# kills what is left.
limit=40
# job OUT MAPPING CMD...: CMD as 4 ranks (2 per host, placed by `--map-by MAPPING`) under mpirun
# on host 0; stdout, stderr to OUT.out, OUT.err; returns mpirun's exit code. (Not run under ASan:
# CMakePresets.json.)
job() {
  local out=$1 mapping=$2
  shift 2
  bash "$hosts_sh" exec "$name" 0 env TESSERA_MPIRUN_HOSTS="$name" TESSERA_MPIRUN_TEST_PID=$$ \
    UCX_TLS=tcp UCX_NET_DEVICES=eth0 TESSERA_COLL_TIMEOUT_MS=20000 \
    timeout -k 5 "$limit" "$mpirun" --allow-run-as-root -n 4 --hostfile "$work/hosts" \
    --map-by "$mapping" --bind-to none --mca plm rsh --mca plm_rsh_agent "$here/mpirun_agent.sh" \
    --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 \
    -x UCX_TLS -x UCX_NET_DEVICES -x TESSERA_COLL_TIMEOUT_MS \
    -x TESSERA_HOST_DEVICES -x TESSERA_HOST_CALLBACK_THREADS \
    "$@" >"$out.out" 2>"$out.err"
}

start=$(date +%s%3N)
job "$work/bench" ppr:2:node \
  "$tessera" bench coll -o allreduce -b 1M -e 4M -f 4 -n 5 -w 2 -c 1 --memory host
code=$?
[ "$code" -eq 0 ] || fail "mpirun of tessera bench coll exited $code"
cat "$work/bench.out"
expect_in "$work/bench.out" "nRanks 4 nHosts 2 launcher openmpi"
for r in 0 1 2 3; do
  grep -qE "Rank +$r Pid +[0-9]+ on +$name-h$((r / 2)) " "$work/bench.out" ||
    fail "bench.out does not list rank $r on host $name-h$((r / 2))"
done
expect_in "$work/bench.out" "Out of bounds values : 0 OK"

# Each rank says where mpirun placed it, then becomes the tuner rank.
# shellcheck disable=SC2016  # expanded by the rank's shell
placed='echo "rank $OMPI_COMM_WORLD_RANK placed on $(hostname)" && exec "$0" tuner'
job "$work/tuner" node sh -c "$placed" "$multinode_rank"
code=$?
[ "$code" -eq 0 ] || fail "mpirun of tessera_multinode_rank tuner exited $code"
for r in 0 1 2 3; do
  expect_in "$work/tuner.out" "rank $r placed on $name-h$((r % 2))"
  expect_in "$work/tuner.out" "rank $r: allreduce 4194304 bytes -> hierarchical"
done
took=$(($(date +%s%3N) - start))
echo "PASS: mpirun started 4 ranks on 2 hosts, by host and round-robin (launcher openmpi," \
  "nHosts 2, hierarchical allreduce on every rank, results checked) in $took ms"
exit 0
