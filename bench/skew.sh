#!/usr/bin/env bash
# Per-batch skew (VALIDATION_CLUSTER.md "Per-batch skew (2026-12-03)"): every figure of that section.
#   bench/skew.sh [BUILD_DIR]
# 1. TensorRT-LLM's DeepSeek-R1 EP32 setting (4,096 one-token decodes a step, Zipf popularity calibrated to
#    its by-rank 1.564 without EPLB), with and without EPLB (288 slots), per-request affinity off and on.
# 2. The same setting with one 128-token prompt per GPU in place of the decodes: the step law's log-sd that
#    reproduces the measured 0.109 under EPLB (the brief's mixture-of-laws reading of that figure).
# 3. SGLang's prefill profile setting (EP32 H100, 16,384 tokens per GPU, EPLB 288 slots, two-batch overlap,
#    engine sglang) at 1K, 2K and 4K prompts, uniform routing (SGLang's "simulated perfect EPLB") and the
#    calibrated popularity with sigma 0, 2.016 and 2.15.
# 4. VALIDATION_CLUSTER's "SGLang's prefill on H100" rows with the sglang engine, sigma off and 2.15.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
S=scenarios/reference/topology_dsv3_4x8xh100_ep32.json
EPLB=('experts.placement="eplb"' experts.redundant_experts=32)
pop() { echo "workload.expert_popularity={\"kind\":\"calibrated\",\"imbalance_ratio\":1.564,\"tokens_per_iteration\":4096,\"ranks\":32,\"request_affinity_sd\":$1}"; }
echo "# 1. decode, 128 one-token requests per GPU"
for sd in 0 2.15; do
  echo "no EPLB sigma $sd: $("$B"/bench/skew_study $S 100 128 0 0 "$(pop $sd)")"
  echo "EPLB sigma $sd: $("$B"/bench/skew_study $S 100 128 0 0 "${EPLB[@]}" "$(pop $sd)")"
done
echo "# 2. one 128-token prompt per GPU, EPLB, sigma' (step law log-sd as in the brief's reading)"
for sd in 0 0.5 0.6 0.61 0.62 0.7; do
  echo "sigma' $sd: $("$B"/bench/skew_study $S 100 0 1 128 "${EPLB[@]}" "$(pop $sd)")"
done
echo "# 3. SGLang prefill profile setting, 16,384 tokens per GPU"
SG=('deployment.engine="sglang"' deployment.max_batched_tokens=16384 deployment.two_batch_overlap=true
  'deployment.all_to_all="high_throughput"')
for L in "16 1024" "8 2048" "4 4096"; do
  set -- $L
  echo "$1 x $2 uniform: $("$B"/bench/skew_study $S 40 0 "$1" "$2" "${SG[@]}" 'workload.expert_popularity={"kind":"uniform"}')"
  for sd in 0 2.016 2.1 2.15 2.2; do
    echo "$1 x $2 EPLB sigma $sd: $("$B"/bench/skew_study $S 40 0 "$1" "$2" "${SG[@]}" "${EPLB[@]}" "$(pop $sd)")"
  done
done
echo "# 4. VALIDATION_CLUSTER rows, engine sglang"
ROW=(--set 'workload.prompt_tokens={"kind":"fixed","tokens":2000}' --set 'workload.output_tokens={"kind":"fixed","tokens":1}'
  --set workload.arrival.rate_per_s=150 --set run.duration_s=30 --set run.warmup_s=10 --set deployment.two_batch_overlap=true
  --set 'deployment.all_to_all="high_throughput"' --set 'deployment.engine="sglang"')
EP24=(--set cluster.nodes=3 --set deployment.ep_size=24 --set 'deployment.attention={"dp":24,"tp":1}')
SET_EPLB=(--set 'experts.placement="eplb"' --set experts.redundant_experts=32)
row() {
  local name=$1 nodes=$2
  shift 2
  "$B"/sim/app/moesim run $S "${ROW[@]}" "$@" --out "$(mktemp -d)" |
    awk -v n="$name" -v nodes="$nodes" '/^Step/ {s=$5; b=$9} /^Expert load/ {g=$6} /^  dense FFN/ {p=$0}
      /^GPU \(mean\)/ {u=$4} END {printf "%s: %.1fk tok/s per node (batch %s / step %s ms), GPU max/mean %s busy %s |%s\n",
        n, b / s / nodes, b, s, g, u, p}'
}
# EP32 at 200 requests/s: at 150 the sglang engine's EP32 steps are not all full. The scenario's Pareto 80/20
# popularity, then the calibrated one of 1.-3.
for law in pareto calibrated; do
  for sd in 0 2.15; do
    P="workload.expert_popularity={\"kind\":\"pareto\",\"request_affinity_sd\":$sd}"
    [ $law = calibrated ] && P=$(pop $sd)
    row "$law EP24 EPLB sigma $sd" 3 "${EP24[@]}" "${SET_EPLB[@]}" --set "$P"
    row "$law EP32 EPLB sigma $sd" 4 "${SET_EPLB[@]}" --set "$P" --set workload.arrival.rate_per_s=200
    row "$law EP32 no EPLB sigma $sd" 4 --set "$P" --set workload.arrival.rate_per_s=200
  done
done
