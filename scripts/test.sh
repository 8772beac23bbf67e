#!/usr/bin/env bash
# README command 2: installs what is missing, configures the Release (OpenMP) build, builds everything,
# and runs the whole test suite (unit tests on every enabled backend, CLI tests, tiny benchmarks,
# layering and format checks) through ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/bootstrap.sh
cmake --preset release > build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
grep -E "^-- kfmm:" build-configure.log || true
rm -f build-configure.log
cmake --build --preset release -j"$(nproc)"
export OMP_PROC_BIND="${OMP_PROC_BIND:-spread}" OMP_PLACES="${OMP_PLACES:-threads}"
ctest --preset release -j"$(nproc)" "$@"
