#!/usr/bin/env bash
# Every test under AddressSanitizer + UndefinedBehaviorSanitizer (float-cast-overflow included where the
# compiler has it), every report fatal, in build-sanitize/ at -O1 (the test command: scripts/test.sh runs
# it). The libraries, the benchmarks and the moesim binary are instrumented; the test files, Catch2's runner and
# the fuzzer's driver are not (they are the harness, and instrumenting them tripled their compile time):
# the tests call instrumented library code, and the CLI, notebook, MPI and fuzz tests drive the instrumented
# binary. Without the CUDA kernels (nvcc takes no -fsanitize: `scripts/test.sh --release` builds them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${MOESIM_SANITIZE_BUILD_DIR:-build-sanitize}
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DMOESIM_WERROR=ON -DMOESIM_SANITIZE=ON -DMOESIM_CUDA=OFF -DMOESIM_BENCH=ON -DBUILD_TESTING=ON \
  "${launcher[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure
