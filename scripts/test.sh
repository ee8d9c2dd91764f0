#!/usr/bin/env bash
# The test command (README "Quick start"; .ci/run calls it). Installs what is missing, then:
#  1. builds the product as users build it (build/: Release, warnings as errors, the CUDA harness when nvcc
#     is found, the benchmarks), without the tests;
#  2. builds every test and runs the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer
#     (scripts/sanitize.sh, build-sanitize/), ctest's summary line at the end.
# `scripts/test.sh --release` instead builds build/ with the tests and runs them uninstrumented (quicker).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${MOESIM_BUILD_DIR:-build}
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
if [ "${1:-}" = --release ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESIM_WERROR=ON -DBUILD_TESTING=ON "${launcher[@]}"
  cmake --build "$build" -j "$(nproc)"
  ctest --test-dir "$build" -j "$(nproc)" --output-on-failure
  exit 0
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESIM_WERROR=ON -DBUILD_TESTING=OFF "${launcher[@]}"
cmake --build "$build" -j "$(nproc)"
MOESIM_SKIP_SETUP=1 scripts/sanitize.sh
