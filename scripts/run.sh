#!/usr/bin/env bash
# The main job, from a fresh clone: installs what is missing, builds, lists every backend and
# device (`tessera devices`), and runs `tessera demo`: plan, launch 4 ranks, train, kill one rank,
# recover it from its buddy's memory, switch plan once, and check the result bitwise against a
# fault-free run (docs/DEMO.md). Extra arguments go to `tessera demo` (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh default
export TESSERA_HOST_DEVICES="${TESSERA_HOST_DEVICES:-4}"
echo "==> tessera devices (TESSERA_HOST_DEVICES=$TESSERA_HOST_DEVICES)"
build/bin/tessera devices
unset TESSERA_HOST_DEVICES  # the demo gives each rank its own host device
echo "==> tessera demo $*"
build/bin/tessera demo "$@"
