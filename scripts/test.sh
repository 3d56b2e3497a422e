#!/usr/bin/env bash
# Sets up the machine, builds, and runs the whole test suite: the default build, then again under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the threaded parts under ThreadSanitizer.
#
# Last, every fuzz target (tests/fuzz) runs a few seconds under libFuzzer + ASan + UBSan.
#
# Usage: scripts/test.sh [--quick]
#   --quick   only the default build (for iterating; CI runs everything)
set -euo pipefail
cd "$(dirname "$0")/.."

presets=(default asan tsan)
fuzz=1
for arg in "$@"; do
  case "$arg" in
    --quick) presets=(default); fuzz=0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
for preset in "${presets[@]}"; do
  echo "==> test.sh: preset '$preset'"
  scripts/build.sh "$preset"
  ctest --preset "$preset"
done
# A bounded run (12 targets x 5 s); the clang build of the libraries they link is most of the
# cost (tests/fuzz/README.md). Longer runs: scripts/fuzz.sh --time 600.
ran="${presets[*]}"
if [ "$fuzz" = 1 ]; then
  echo "==> test.sh: fuzz targets"
  scripts/fuzz.sh --time 5
  ran+=", fuzz targets"
fi
echo "==> test.sh: all presets passed ($ran)"
