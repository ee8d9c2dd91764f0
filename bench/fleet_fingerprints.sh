#!/usr/bin/env bash
# Fingerprints of multi-replica runs (bench/fingerprints.sh runs one replica each, where arrival routing
# has a single instance to pick from): replicas of the EP16 speed reference under every router, the PD
# reference (a KV-aware decode router over 72 groups) and load-aware admission. One line per run: name,
# fingerprint, steps, arrived requests. Compare two binaries with
#   diff <(bench/fleet_fingerprints.sh OLD) <(bench/fleet_fingerprints.sh NEW)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/sim/app/moesim}
DUR=${2:-10}
S=scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
F=(--set run.warmup_s=1 --set run.max_drain_s=1)
runs=(
  "64-replicas-least-loaded|$S|--set cluster.nodes=128 --set workload.arrival.rate_per_s=1280"
  "16-replicas-round-robin|$S|--set cluster.nodes=32 --set workload.arrival.rate_per_s=400 --set deployment.router=\"round_robin\""
  "16-replicas-kv-aware|$S|--set cluster.nodes=32 --set workload.arrival.rate_per_s=400 --set deployment.router=\"kv_aware\""
  "16-replicas-cache-aware|$S|--set cluster.nodes=32 --set workload.arrival.rate_per_s=400 --set deployment.router=\"cache_aware\" --set deployment.prefix_caching=true"
  "16-replicas-load-aware|$S|--set cluster.nodes=32 --set workload.arrival.rate_per_s=400 --set experts.admission=\"gpu_load_aware\""
  "pd-kv-aware|scenarios/reference/dsv3_pd_disagg.json|"
)
for run in "${runs[@]}"; do
  IFS='|' read -r name scen sets <<<"$run"
  eval "extra=($sets)"
  "$BIN" run "$scen" -q -j 1 --out "$OUT/run" --set "run.duration_s=$DUR" "${F[@]}" "${extra[@]}" >/dev/null
  python3 - "$name" "$OUT/run/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
print(sys.argv[1], r["fingerprint"], r["step"]["count"], r["requests"]["arrived"])
PY
done
