#!/usr/bin/env bash
# Sets up the machine, builds, and runs the whole test suite: the default build, then again under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the threaded parts under ThreadSanitizer.
# The ASan tree (clang) also holds the fuzz targets (tests/fuzz): after its tests, each runs a few
# seconds under libFuzzer + ASan + UBSan.
#
# While one preset's tests run, the next preset's tree is built at the lowest CPU priority
# (nice 19): the tests spend much of their time waiting on other processes (ranks, launchers,
# timeouts), and the build takes only the CPU they leave idle, so the tests run as they would
# alone while the build gets ahead (CI's 45-minute budget on 2 cores, README.md). The build's
# output goes to build-logs/<preset>.log and is shown when it fails.
#
# Usage: scripts/test.sh [--quick] [--serial]
#   --quick    only the default build (for iterating; CI runs everything)
#   --serial   build each preset only after the previous tests finished (no background build)
set -euo pipefail
cd "$(dirname "$0")/.."

presets=(default asan tsan)
fuzz=1
overlap=1
for arg in "$@"; do
  case "$arg" in
    --quick) presets=(default); fuzz=0 ;;
    --serial) overlap=0 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
mkdir -p build-logs

# start_background <name> <command...>: runs the command at nice 19 in the background, its output in
# build-logs/<name>.log. Job control (set -m) gives it its own process group, so stop_background
# can end the whole build; not its own session (setsid): with the kernel's autogroup scheduling
# (sched_autogroup_enabled, on in Debian) every session is a group that gets an equal share of
# the CPU whatever its nice value, so a build in a new session would take half the CPU from the
# tests instead of the idle time only.
background_pid=""
background_name=""
start_background() {
  background_name="$1"
  shift
  echo "==> test.sh: building '$background_name' in the background (build-logs/$background_name.log)"
  set -m
  nice -n 19 "$@" > "build-logs/$background_name.log" 2>&1 &
  background_pid=$!
  set +m
}
finish_background() {
  [ -n "$background_pid" ] || return 0
  local pid="$background_pid" name="$background_name"
  background_pid=""
  if ! wait "$pid"; then
    echo "test.sh: the background build of '$name' failed; the end of build-logs/$name.log:" >&2
    tail -40 "build-logs/$name.log" >&2
    exit 1
  fi
  echo "==> test.sh: background build of '$name' done"
}
stop_background() { [ -z "$background_pid" ] || kill -- "-$background_pid" 2>/dev/null || true; }
trap stop_background EXIT

# next_build <index>: what to build while preset <index>'s tests run (the next preset).
next_build() {
  local next=$(( $1 + 1 ))
  if [ "$next" -lt "${#presets[@]}" ]; then
    start_background "${presets[$next]}" scripts/build.sh "${presets[$next]}"
  fi
}

for i in "${!presets[@]}"; do
  preset="${presets[$i]}"
  echo "==> test.sh: preset '$preset'"
  if [ -n "$background_pid" ]; then
    finish_background
  fi
  scripts/build.sh "$preset"  # a no-op when the background build made it already
  [ "$overlap" = 1 ] && next_build "$i"
  ctest --preset "$preset"
  # A bounded run (12 targets x 5 s) of the fuzz targets the ASan tree built beside its tests
  # (tests/fuzz/README.md). Longer runs, with comparison tracing: scripts/fuzz.sh --time 600.
  if [ "$preset" = asan ] && [ "$fuzz" = 1 ]; then
    echo "==> test.sh: fuzz targets (build-asan)"
    scripts/fuzz.sh --build-dir build-asan --time 5
  fi
done
ran="${presets[*]}"
[ "$fuzz" = 1 ] && ran+=", fuzz targets"
echo "==> test.sh: all presets passed ($ran)"
