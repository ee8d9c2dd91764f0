#!/usr/bin/env bash
# The operations day (BENCHMARKS.md, "Operations day"): the ServeGen DeepSeek-R1 day on the PD reference with
# the planner, one core, at the scenario's MoE layer sample and, for comparison, at others given as arguments
# (0: every layer of every step). One line per run: CPU seconds, steps, mean step, GPU-hours, P99 TTFT and
# TPOT, SLA violations, goodput. Compare rows of one invocation (the machine is shared).
#
#   bench/ops_day.sh [moesim binary] [sample ...]     e.g. bench/ops_day.sh build/sim/app/moesim 4 0
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/sim/app/moesim}
shift || true
SAMPLES=("${@:-4}")
S=${SCENARIO:-scenarios/reference/ops_servegen_day_pd_dsv3.json}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for n in "${SAMPLES[@]}"; do
  /usr/bin/time -f "%U" -o "$OUT/cpu" "$BIN" run "$S" --set "run.moe_layer_sample=$n" ${SEED:+--seed "$SEED"} \
    --out "$OUT/$n" -q -j 1 >/dev/null
  python3 - "$OUT/$n/report.json" "$n" "$(cat "$OUT/cpu")" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s, o, sla = r["step"], r["operations"], r["sla"]
print(f"sample {sys.argv[2]:>2}: {float(sys.argv[3]):7.1f} s CPU, {s['count']:,} steps, mean step "
      f"{s['mean_s'] * 1e3:.2f} ms, {o['gpu_hours']:.1f} GPU-h, P99 TTFT {sla['ttft_at_percentile_s']:.3f} s, "
      f"TPOT {sla['tpot_at_percentile_s'] * 1e3:.2f} ms, violations {sla['violation_rate'] * 100:.2f}%, "
      f"goodput {sla['goodput_requests_per_s']:.3f} req/s, fingerprint {r['fingerprint']}")
PY
done
