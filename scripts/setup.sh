#!/usr/bin/env bash
# Installs every system package Tessera needs, from Debian's archive. Idempotent: packages already
# present are skipped, and apt waits for the package lock instead of failing when another apt runs.
#
# Usage: scripts/setup.sh [--minimal]
#   --minimal  only what the HAL, backends and conformance suite need (compiler, CMake, Ninja,
#              GoogleTest); for vendors who build just their backend.
set -euo pipefail

minimal=0
for arg in "$@"; do
  case "$arg" in
    --minimal) minimal=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

core_packages=(build-essential cmake ninja-build lld pkg-config googletest libgtest-dev libgmock-dev
               libbenchmark-dev)
full_packages=(libhwloc-dev hwloc libucx-dev ucx-utils openmpi-bin libopenmpi-dev libze-dev libze1
               hipcc libamdhip64-dev libopenblas-dev libzstd-dev libxxhash-dev nlohmann-json3-dev
               libcli11-dev clang-format clang-14 libclang-rt-14-dev llvm-spirv-14 spirv-tools
               libpmix-dev iproute2
               python3-dev python3-pybind11 pybind11-dev python3-pytest python3-torch libtorch-dev)
packages=("${core_packages[@]}")
[ "$minimal" = 1 ] || packages+=("${full_packages[@]}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
apt_opts=(-o DPkg::Lock::Timeout=600 -y -q --no-install-recommends)
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get -o DPkg::Lock::Timeout=600 update -q
$sudo apt-get "${apt_opts[@]}" install "${missing[@]}"
