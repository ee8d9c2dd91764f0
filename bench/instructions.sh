#!/usr/bin/env bash
# Instruction counts (valgrind --tool=callgrind; repeatable on a shared machine, unlike wall time) of the runs
# that speed changes are held to: the EP16 reference, the same with every experts-in-the-loop mechanism on, and
# 64 replicas of it (1,024 GPUs), for DUR simulated seconds (default 120; the 1,024-GPU run DUR / 15 and at most
# one second of drain). One line per run: name and
# instructions (G). Compare two binaries in one invocation: bench/instructions.sh OLD NEW.
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${DUR:-120}
S=scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
source bench/mechanisms.sh
ALL=(--set "$COACT" --set "$DRIFT" --set 'experts.placement="coactivation"' --set experts.rebalance.every_steps=1000
     --set "$TIERS" --set "$QUANT" --set experts.rerouting.threshold=1.3 --set 'experts.admission="gpu_load_aware"')
count() {  # BIN NAME ARGS...
  local bin=$1 name=$2
  shift 2
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg" "$bin" run "$S" -q -j 1 --out "$OUT/run" \
    --set "run.duration_s=$DUR" --set run.warmup_s=10 "$@" >/dev/null 2>"$OUT/log"
  printf '%s %s %.3f G\n' "$bin" "$name" "$(awk '/^summary:/ {print $2 / 1e9}' "$OUT/cg")"
}
for bin in "$@"; do
  count "$bin" "EP16"
  count "$bin" "every-mechanism" "${ALL[@]}"
  count "$bin" "1024-GPUs" --set cluster.nodes=128 --set workload.arrival.rate_per_s=1280 \
    --set run.duration_s=$((DUR / 15)) --set run.warmup_s=1 --set run.max_drain_s=1
done
