#!/usr/bin/env bash
# Configures and builds one CMake preset (default: "default"). Re-running is cheap: CMake and
# Ninja redo only what changed.
# Usage: scripts/build.sh [default|asan|tsan|minimal] [extra cmake --build args...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
shift || true
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" "$@"
