#!/usr/bin/env bash
# OpenMPI's rsh launcher agent for mpirun_test.sh (`--mca plm_rsh_agent`): mpirun calls it as
# `mpirun_agent.sh ADDRESS ORTED-COMMAND...` to start its daemon on another emulated host, where
# ssh would log in. It runs the command (a shell command line, as ssh would) on the host that has
# ADDRESS (10.77.0.H+1, scripts/netns-hosts.sh).
#
# mpirun runs on host 0, in that host's mount namespace, where the other hosts' namespace files are
# not mounted; so the agent first returns to the mount namespace of the test, whose pid is in
# TESSERA_MPIRUN_TEST_PID. TESSERA_MPIRUN_HOSTS names the hosts (netns-hosts.sh up NAME).
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
address=${1:?usage: mpirun_agent.sh ADDRESS COMMAND...}
shift
if ! [[ "$address" =~ ^10\.77\.0\.([1-8])$ ]]; then
  echo "mpirun_agent.sh: '$address' is not an emulated host's address (10.77.0.1..8)" >&2
  exit 1
fi
host=$((BASH_REMATCH[1] - 1))
exec nsenter --mount="/proc/${TESSERA_MPIRUN_TEST_PID:?}/ns/mnt" -- \
  bash "$here/../../scripts/netns-hosts.sh" exec "${TESSERA_MPIRUN_HOSTS:?}" "$host" sh -c "$*"
