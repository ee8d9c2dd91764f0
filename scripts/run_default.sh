#!/usr/bin/env bash
# Installs what is missing, builds moesim and runs the default scenario (DeepSeek-V3 FP8 on 8xH200, EP8).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target moesim
build/sim/app/moesim run "$@"
