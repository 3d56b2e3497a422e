#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan + UBSan, full coverage with
# comparison tracing) and runs each for a bounded time over its seeds (tests/fuzz/corpus/<target>)
# and regressions (tests/fuzz/regressions/<target>). New interesting inputs go to
# <build>/corpus/<target>, crashes to <build>/artifacts/<target>/; the script exits 1 when any
# target found one (copy it into tests/fuzz/regressions/<target>/ once fixed: ctest replays it in
# every preset). See tests/fuzz/README.md.
#
# Usage: scripts/fuzz.sh [--time SECONDS] [--no-build] [--build-dir DIR] [target...]
#   --time S         seconds per target (default 60)
#   --no-build       use the build tree as it is
#   --build-dir DIR  fuzz the targets of another clang tree built with TESSERA_FUZZ (CI: build-asan,
#                    whose edge-only coverage suits its short runs); implies --no-build
#   target           some of the targets (default: every one this build has)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
build=1
out=build-fuzz
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) seconds="${2:?--time needs seconds}"; shift 2 ;;
    --no-build) build=0; shift ;;
    --build-dir) out="${2:?--build-dir needs a directory}"; build=0; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: --time '$seconds' is not whole seconds" >&2; exit 2 ;; esac

if [ "$build" = 1 ]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz
fi
if [ ! -f "$out/fuzz/targets.txt" ]; then
  echo "fuzz.sh: $out has no fuzz targets (fuzz/targets.txt): build it with TESSERA_FUZZ=ON" >&2
  exit 2
fi
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < "$out/fuzz/targets.txt"
fi

failed=()
for t in "${targets[@]}"; do
  bin="$out/fuzz/tessera-fuzz-$t"
  if [ ! -x "$bin" ]; then
    echo "fuzz.sh: no fuzz target '$t' in $out/fuzz (targets: $(tr '\n' ' ' < "$out/fuzz/targets.txt"))" >&2
    exit 2
  fi
  mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
  inputs=("$out/corpus/$t" "tests/fuzz/corpus/$t")
  [ -d "tests/fuzz/regressions/$t" ] && inputs+=("tests/fuzz/regressions/$t")
  echo "==> fuzz.sh: $t for ${seconds}s"
  # -rss_limit_mb: a parser may hold a few hundred MB at most; -timeout: one input, seconds.
  if ! ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
       UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
       "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
         -artifact_prefix="$out/artifacts/$t/" "${inputs[@]}" > "$out/artifacts/$t/log.txt" 2>&1; then
    failed+=("$t")
    echo "fuzz.sh: $t FAILED; the input is in $out/artifacts/$t/, the report:" >&2
    grep -E "ERROR|SUMMARY|fuzz check|runtime error|Test unit written" "$out/artifacts/$t/log.txt" | head -20 >&2
  else
    grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$out/artifacts/$t/log.txt" |
      tr '\n' ' '
    echo
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "==> fuzz.sh: ${#targets[@]} targets ran ${seconds}s each without a finding"
