#!/usr/bin/env bash
# Wall time and peak memory of one simulated hour of the EP16 speed reference with each experts-in-the-loop
# mechanism switched on alone, and with all of them on together (BENCHMARKS.md, "Targets and where they stand").
# Prints a Markdown table; the wall time is the median of REPS runs (the machine is shared: compare rows of
# one invocation, not across days).
#
#   bench/mechanism_costs.sh [moesim binary] [reps]      e.g. bench/mechanism_costs.sh build/sim/app/moesim 3
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/sim/app/moesim}
REPS=${2:-1}
S=scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

source bench/mechanisms.sh

# name | --set arguments (one per line)
runs=(
  "none|"
  "EPLB, 1 redundant slot per GPU|experts.placement=\"eplb\"
experts.redundant_slots_per_gpu=1"
  "EPLB + rebalance every 1000 steps|experts.placement=\"eplb\"
experts.redundant_slots_per_gpu=1
experts.rebalance.every_steps=1000"
  "drift, half-life 600 s|$DRIFT"
  "co-activation rho 0.5 + METIS placement|$COACT
experts.placement=\"coactivation\""
  "tiers: 36 GiB HBM, cold in host DRAM|$TIERS"
  "quantisation by hotness|$QUANT"
  "rerouting above 1.3x|experts.rerouting.threshold=1.3"
  "GPU-load-aware admission|experts.admission=\"gpu_load_aware\""
  "all of the above (co-activation placement)|$COACT
$DRIFT
experts.placement=\"coactivation\"
experts.rebalance.every_steps=1000
$TIERS
$QUANT
experts.rerouting.threshold=1.3
experts.admission=\"gpu_load_aware\""
)

echo "| mechanism | wall (median of $REPS) | peak RSS | steps | output tok/s |"
echo "|---|---|---|---|---|"
for run in "${runs[@]}"; do
  name=${run%%|*}
  sets=${run#*|}
  args=()
  if [[ -n "$sets" ]]; then
    args+=(--set)
    while IFS= read -r line; do args+=("$line"); done <<<"$sets"
  fi
  walls=()
  rss=0
  for ((r = 0; r < REPS; ++r)); do
    /usr/bin/time -f "%e %M" -o "$OUT/time" "$BIN" run "$S" -q --out "$OUT/run" "${args[@]}" >/dev/null
    read -r wall kb <"$OUT/time"
    walls+=("$wall")
    rss=$kb
  done
  median=$(printf '%s\n' "${walls[@]}" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
  read -r steps tps < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["step"]["count"], round(r["throughput"]["output_tokens_per_s"]))' "$OUT/run/report.json")
  printf '| %s | %s s | %s MB | %s | %s |\n' "$name" "$median" "$(awk -v k="$rss" 'BEGIN {printf "%.1f", k / 1024}')" "$steps" "$tps"
done
