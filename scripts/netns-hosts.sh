#!/usr/bin/env bash
# Emulated hosts for multi-node tests: network namespaces joined by veth pairs to a bridge that
# lives in a namespace of its own, so nothing touches this machine's interfaces and traffic only
# flows between these namespaces. Each host also has its own mount namespace (a private /dev/shm,
# so shared memory cannot leak between hosts, and a sysfs of its own network) and UTS namespace
# (its own host name, so Tessera sees different hosts), both kept for later `exec`s. Each host's
# link is shaped on its egress: tc netem (rate and one-way delay) where the kernel has sch_netem,
# else tc tbf (rate only; `up` says the delay was not applied). Root only.
#
# Usage:
#   netns-hosts.sh check                       exit 0 if hosts can be made here, else 77 + why
#   netns-hosts.sh up NAME [--hosts N] [--rate RATE] [--delay DELAY]
#                                              N in 1..8 (default 2); RATE a tc rate (default
#                                              1gbit, "none" for no shaping); DELAY a tc time
#                                              (default 100us)
#   netns-hosts.sh exec NAME H CMD [ARGS...]   runs CMD on host H (0..N-1) in the current directory
#   netns-hosts.sh addr NAME H                 prints host H's address (10.77.0.H+1)
#   netns-hosts.sh down NAME                   kills what runs on the hosts, removes everything;
#                                              safe on a half-made or missing NAME
# NAME: 1-24 characters of [a-z0-9-], unique per test run (namespaces are global to the machine).
# Addresses are the same for every NAME: each set of hosts is a network of its own.
# Exit: 0, 1 failure, 2 usage, 77 cannot make namespaces here (not root, no iproute2, ...).
set -u -o pipefail

state_root=/run/tessera-netns
max_hosts=8

die() {
  echo "netns-hosts.sh: $*" >&2
  exit 1
}
usage() {
  sed -n '2,22p' "$0" >&2
  exit 2
}
skip() {
  echo "SKIP: $*"
  exit 77
}

check_name() {
  [[ "$1" =~ ^[a-z0-9-]{1,24}$ ]] || die "NAME '$1' must be 1-24 characters of [a-z0-9-]"
}
ns_bridge() { echo "tsr-$1-br"; }
ns_host() { echo "tsr-$1-h$2"; }

# Why hosts cannot be made here, or nothing.
why_not() {
  [ "${EUID:-$(id -u)}" -eq 0 ] || {
    echo "network namespaces need root (uid ${EUID:-$(id -u)})"
    return
  }
  local tool
  for tool in ip tc unshare nsenter mount; do
    command -v "$tool" >/dev/null 2>&1 || {
      echo "no '$tool' command (iproute2, util-linux)"
      return
    }
  done
  local probe="tsr-probe-$$" err
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "cannot create a network namespace: $err"
    return
  fi
  if ! err=$(ip -n "$probe" link add b0 type bridge 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot create a bridge in a namespace: $err"
    return
  fi
  ip netns del "$probe" 2>/dev/null
  if ! err=$(unshare -m true 2>&1); then
    echo "cannot create a mount namespace: $err"
    return
  fi
}

cmd_check() {
  local why
  why=$(why_not)
  [ -z "$why" ] || skip "$why"
  echo "netns hosts can be made here"
}

cmd_down() {
  local name=$1 dir="$state_root/$1" h ns pid
  for ((h = 0; h < max_hosts; h++)); do
    ns=$(ns_host "$name" "$h")
    [ -e "/run/netns/$ns" ] || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null  # takes its end of the veth pair, and so the pair, with it
  done
  ip netns del "$(ns_bridge "$name")" 2>/dev/null
  if [ -d "$dir" ]; then
    for f in "$dir"/mnt-* "$dir"/uts-*; do [ -e "$f" ] && umount "$f" 2>/dev/null; done
    umount "$dir" 2>/dev/null
    rm -rf "$dir"
  fi
  true
}

# Shapes eth0 of namespace $1 (rate $2, delay $3): netem, or tbf where netem is missing.
shape() {
  local ns=$1 rate=$2 delay=$3
  if ip netns exec "$ns" tc qdisc add dev eth0 root netem rate "$rate" delay "$delay" \
    limit 100000 2>/dev/null; then
    shaped="netem rate $rate, delay $delay one way"
    return
  fi
  # A burst of 512 KiB holds the largest (GSO) packet veth hands over and 4 ms at 1 Gbit/s.
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 512kb latency 20ms
  shaped="tbf rate $rate; NO delay (this kernel has no sch_netem)"
}

up_name=""
cmd_up() {
  local name=$1 hosts=2 rate=1gbit delay=100us shaped="no shaping"
  up_name=$name
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --hosts) hosts=${2:?--hosts N}; shift 2 ;;
      --rate) rate=${2:?--rate RATE}; shift 2 ;;
      --delay) delay=${2:?--delay DELAY}; shift 2 ;;
      *) usage ;;
    esac
  done
  [[ "$hosts" =~ ^[1-8]$ ]] || die "--hosts must be 1..$max_hosts"
  local why
  why=$(why_not)
  [ -z "$why" ] || skip "$why"
  [ ! -e "$state_root/$name" ] || die "hosts '$name' exist already (netns-hosts.sh down $name)"
  trap 'cmd_down "$up_name"' EXIT  # a half-made set is removed; disarmed at the end
  set -e
  local dir="$state_root/$name" br h ns
  mkdir -p "$dir"
  # Persistent namespaces are bind mounts of /proc/PID/ns/*; they need a private mount point.
  mount --bind "$dir" "$dir"
  mount --make-private "$dir"
  echo "$hosts" >"$dir/hosts"
  br=$(ns_bridge "$name")
  ip netns add "$br"
  ip -n "$br" link add br0 type bridge
  ip -n "$br" link set br0 up
  for ((h = 0; h < hosts; h++)); do
    ns=$(ns_host "$name" "$h")
    ip netns add "$ns"
    ip -n "$br" link add "h$h" type veth peer name eth0 netns "$ns"
    ip -n "$br" link set "h$h" master br0 up
    ip -n "$ns" addr add "10.77.0.$((h + 1))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    [ "$rate" = none ] || shape "$ns" "$rate" "$delay"
    touch "$dir/mnt-$h" "$dir/uts-$h"
    # Made from inside the host's network namespace, so its sysfs shows that network.
    nsenter --net="/run/netns/$ns" unshare --mount="$dir/mnt-$h" --uts="$dir/uts-$h" \
      --propagation private sh -c "mount -t tmpfs -o size=256m,mode=1777 tmpfs /dev/shm &&
        umount -l /sys && mount -t sysfs sysfs /sys && hostname $name-h$h"
  done
  set +e
  trap - EXIT
  echo "hosts '$name': $hosts at 10.77.0.1..$hosts, each link: $shaped"
}

cmd_exec() {
  local name=$1 h=$2
  shift 2
  [ $# -gt 0 ] || usage
  local dir="$state_root/$name" ns
  ns=$(ns_host "$name" "$h")
  [ -e "/run/netns/$ns" ] && [ -e "$dir/mnt-$h" ] || die "no host $h in '$name' (netns-hosts.sh up)"
  # Entering a mount namespace moves to its root: come back to this directory.
  exec nsenter --net="/run/netns/$ns" --mount="$dir/mnt-$h" --uts="$dir/uts-$h" \
    sh -c 'cd "$0" && exec "$@"' "$PWD" "$@"
}

[ $# -ge 1 ] || usage
case "$1" in
  check) cmd_check ;;
  up) [ $# -ge 2 ] || usage; check_name "$2"; cmd_up "${@:2}" ;;
  down) [ $# -eq 2 ] || usage; check_name "$2"; cmd_down "$2" ;;
  exec) [ $# -ge 4 ] || usage; check_name "$2"; [[ "$3" =~ ^[0-7]$ ]] || usage; cmd_exec "${@:2}" ;;
  addr) [ $# -eq 3 ] || usage; [[ "$3" =~ ^[0-7]$ ]] || usage; echo "10.77.0.$(($3 + 1))" ;;
  *) usage ;;
esac
