#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (float-cast-overflow included
# where the compiler has it), every report fatal. Built at -O1 without the CUDA kernels and the benchmarks
# to keep CI time down (scripts/test.sh runs the Release build first; .ci/run runs both). The fuzz test runs
# fewer cases here (MOESIM_FUZZ_CI_CASES) because every case is an instrumented process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${MOESIM_SANITIZE_BUILD_DIR:-build-sanitize}
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DMOESIM_WERROR=ON -DMOESIM_SANITIZE=ON -DMOESIM_CUDA=OFF -DMOESIM_BENCH=OFF -DMOESIM_FUZZ_CI_CASES=400 \
  "${launcher[@]}"
cmake --build "$build" -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The notebook test only drives the binary from Python; the Release run covers it.
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure -E '^notebooks:'
