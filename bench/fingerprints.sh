#!/usr/bin/env bash
# Fingerprints and headline figures of the 11 reference runs that every speed or refactoring change is checked
# against (BENCHMARKS.md): the EP16 reference with each experts-in-the-loop mechanism, all of them, 1P1D and
# prefix caching, 120 simulated s each (prefix caching: its trace's first 120 s). One line per run:
# name, fingerprint, steps, mean step, output tok/s, mean GPU busy share and HBM bandwidth utilisation. Compare two binaries with
#   diff <(bench/fingerprints.sh OLD) <(bench/fingerprints.sh NEW)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/sim/app/moesim}
DUR=${2:-120}
S=scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
source bench/mechanisms.sh
PD='deployment.pools=[{"role":"prefill","instances":1,"ep_size":8,"attention":{"dp":8,"tp":1}},{"role":"decode","instances":1,"ep_size":8,"attention":{"dp":8,"tp":1}}]'
runs=(
  "reference|$S|"
  "tiers|$S|$TIERS"
  "quantisation|$S|$QUANT"
  "co-activation|$S|$COACT
experts.placement=\"coactivation\""
  "drift|$S|$DRIFT"
  "rerouting|$S|experts.rerouting.threshold=1.3"
  "eplb+rebalance|$S|experts.placement=\"eplb\"
experts.redundant_slots_per_gpu=1
experts.rebalance.every_steps=1000"
  "tiers+eplb+quant|$S|experts.placement=\"eplb\"
experts.redundant_slots_per_gpu=1
$TIERS
$QUANT"
  "every-mechanism|$S|$COACT
$DRIFT
experts.placement=\"coactivation\"
experts.rebalance.every_steps=1000
$TIERS
$QUANT
experts.rerouting.threshold=1.3
experts.admission=\"gpu_load_aware\""
  "1P1D|$S|$PD"
  "prefix-caching|scenarios/reference/prefix_conversation_mooncake.json|"
)
for run in "${runs[@]}"; do
  IFS='|' read -r name scen sets <<<"${run%%$'\n'*}"
  rest=""
  [[ "$run" == *$'\n'* ]] && rest=${run#*$'\n'}
  args=(--set "run.duration_s=$DUR")
  [[ -n "$sets" ]] && args+=(--set "$sets")
  if [[ -n "$rest" ]]; then
    while IFS= read -r line; do args+=(--set "$line"); done <<<"$rest"
  fi
  "$BIN" run "$scen" -q --out "$OUT/run" "${args[@]}" >/dev/null
  python3 - "$name" "$OUT/run/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
m = r["gpu"]["mean"]
print(sys.argv[1], r["fingerprint"], r["step"]["count"], "step %.4f ms" % (1e3 * r["step"]["mean_s"]),
      "%.2f tok/s" % r["throughput"]["output_tokens_per_s"],
      "busy %.4f hbm %.4f" % (m["busy"], m["hbm_bw_util"]))
PY
done
