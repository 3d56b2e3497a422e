#!/usr/bin/env bash
# The ctest fixture of tests/multinode: `up STATE` makes two emulated hosts (scripts/netns-hosts.sh)
# under a name unique to this run and writes the name to STATE; `down STATE` removes them. Where
# hosts cannot be made, `up` writes "SKIP <why>" to STATE and exits 77, and every test that needs
# the hosts skips with that reason.
#
# Usage: fixture.sh up|down STATE
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
hosts_sh="$here/../../scripts/netns-hosts.sh"
action=${1:?usage: fixture.sh up|down STATE}
state=${2:?usage: fixture.sh up|down STATE}

leftover() {  # the hosts a previous run of this build left behind (killed before its cleanup)
  [ -f "$state" ] || return 0
  local name
  name=$(head -n1 "$state")
  case "$name" in SKIP*|"") ;; *) bash "$hosts_sh" down "$name" ;; esac
  rm -f "$state"
}

case "$action" in
  up)
    leftover
    name="t$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
    out=$(bash "$hosts_sh" up "$name" --hosts 2 --rate 1gbit --delay 100us 2>&1)
    code=$?
    echo "$out"
    if [ "$code" -eq 77 ]; then
      echo "SKIP ${out#SKIP: }" >"$state"
      exit 77
    fi
    [ "$code" -eq 0 ] || exit 1
    echo "$name" >"$state"
    ;;
  down) leftover ;;
  *) echo "usage: fixture.sh up|down STATE" >&2; exit 2 ;;
esac
