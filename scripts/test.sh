#!/usr/bin/env bash
# The test command (README "Quick start"; .ci/run calls it). Installs what is missing, then builds every
# test (and the benchmarks) with AddressSanitizer + UndefinedBehaviorSanitizer and runs the whole suite
# there (scripts/sanitize.sh, build-sanitize/), ctest's summary line at the end. The product binary is
# scripts/run_default.sh's build (build/, Release).
# `scripts/test.sh --release` instead builds build/ (Release, warnings as errors, the CUDA kernels and their
# test when nvcc is found, the benchmarks) with the tests and runs them uninstrumented: quicker while
# developing, and the way to run the CUDA test on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != --release ]; then
  exec scripts/sanitize.sh
fi
scripts/setup.sh
build=${MOESIM_BUILD_DIR:-build}
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESIM_WERROR=ON "${launcher[@]}"
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure
