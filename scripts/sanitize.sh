#!/usr/bin/env bash
# Tests under AddressSanitizer + UndefinedBehaviorSanitizer (float-cast-overflow included where the compiler
# has it), every report fatal, built at -O1 without the CUDA kernels and the benchmarks. In CI (.ci/run,
# after scripts/test.sh) it builds the binary, the fuzzer and the engine and scenario tests and runs those
# tests and 400 fuzz cases against the instrumented binary: the parsing and limits code every input goes
# through. The whole suite under sanitizers (MOESIM_SANITIZE_ALL=1) needs about twice the CPU time and does
# not fit CI's 20 minutes on 2 cores next to the Release build (see README, "Testing").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${MOESIM_SANITIZE_BUILD_DIR:-build-sanitize}
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DMOESIM_WERROR=ON -DMOESIM_SANITIZE=ON -DMOESIM_CUDA=OFF -DMOESIM_BENCH=OFF -DMOESIM_FUZZ_CI_CASES=400 \
  "${launcher[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
if [ "${MOESIM_SANITIZE_ALL:-0}" = 1 ]; then
  cmake --build "$build" -j "$(nproc)"
  # The notebook test only drives the binary from Python; the Release run covers it.
  ctest --test-dir "$build" -j "$(nproc)" --output-on-failure -E '^notebooks:'
else
  cmake --build "$build" -j "$(nproc)" --target moesim moesim_fuzz test_engine test_scenario
  ctest --test-dir "$build" -j "$(nproc)" --output-on-failure -R '^(engine|scenario|fuzz):'
fi
