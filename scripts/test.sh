#!/usr/bin/env bash
# Sets up the machine, builds, and runs the whole test suite: the default build, then again under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the threaded parts under ThreadSanitizer.
#
# Usage: scripts/test.sh [--quick]
#   --quick   only the default build (for iterating; CI runs everything)
set -euo pipefail
cd "$(dirname "$0")/.."

presets=(default asan tsan)
for arg in "$@"; do
  case "$arg" in
    --quick) presets=(default) ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
for preset in "${presets[@]}"; do
  echo "==> test.sh: preset '$preset'"
  scripts/build.sh "$preset"
  ctest --preset "$preset"
done
echo "==> test.sh: all presets passed (${presets[*]})"
