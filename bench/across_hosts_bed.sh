# Sourced by bench/*_across_hosts.sh: the two-host namespace test bed they share.
#   link_gbps SCRIPT RATE      the tc rate (e.g. 1gbit, 500mbit) in Gbit/s on stdout; exit 2 naming
#                              SCRIPT when the unit is not gbit, mbit or kbit
#   bed_up PREFIX              checks that namespaces work (exit 77 with the reason otherwise),
#                              brings up 2 hosts at $rate as PREFIX-<pid>, makes $work (a temp
#                              folder, removed on exit unless KEEP_LOGS is set), tears both down on
#                              exit or interrupt, and exports a per-run TESSERA_STORE_TOKEN.
# Needs $hosts_sh (scripts/netns-hosts.sh) and $rate; sets $name and $work.
link_gbps() {
  case "$2" in
    *gbit) echo "${2%gbit}" ;;
    *mbit) awk "BEGIN{print ${2%mbit}/1000}" ;;
    *kbit) awk "BEGIN{print ${2%kbit}/1e6}" ;;
    *) echo "$1: RATE '$2' must end in gbit, mbit or kbit" >&2; exit 2 ;;
  esac
}

bed_up() {
  bash "$hosts_sh" check >/dev/null || { bash "$hosts_sh" check; exit 77; }
  name="$1-$$"
  work=$(mktemp -d "${TMPDIR:-/tmp}/tsr-$1-XXXXXX")
  trap bed_down EXIT
  trap 'exit 1' INT TERM
  bash "$hosts_sh" up "$name" --hosts 2 --rate "$rate" || exit 1
  export TESSERA_STORE_TOKEN="$name-$RANDOM$RANDOM"
}

bed_down() {
  bash "$hosts_sh" down "$name"
  if [ -n "${KEEP_LOGS:-}" ]; then echo "logs: $work"; else rm -rf "$work"; fi
}
