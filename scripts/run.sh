#!/usr/bin/env bash
# The main job, from a fresh clone: installs what is missing, builds, lists every backend and
# device (`tessera devices`), and runs the conformance suite on the host backend with four
# virtual devices. Later layers grow this into `tessera demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh default
export TESSERA_HOST_DEVICES="${TESSERA_HOST_DEVICES:-4}"
echo "==> tessera devices (TESSERA_HOST_DEVICES=$TESSERA_HOST_DEVICES)"
build/bin/tessera devices
echo "==> tessera-cts --backend host"
build/bin/tessera-cts --backend host --gtest_brief=1
