#!/usr/bin/env bash
# Configures and builds one CMake preset (default: "default"). Re-running is cheap: CMake and
# Ninja redo only what changed.
# Usage: scripts/build.sh [default|asan|tsan|minimal] [extra cmake --build args...]
#
# TESSERA_CI=1 (set by .ci/run) builds the default preset with line tables only (-g1 instead of
# -g): backtraces keep file and line, and the build is ~25% faster, which CI's 45-minute budget on
# 2 cores needs (README.md). The sanitizer presets always use -g1.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
shift || true
configure_args=()
if [ "${TESSERA_CI:-0}" = 1 ] && [ "$preset" = default ]; then
  configure_args+=(-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
                   -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")
fi
cmake --preset "$preset" "${configure_args[@]}" >/dev/null
cmake --build --preset "$preset" "$@"
