#!/usr/bin/env bash
# RoCE against InfiniBand on the EP32 topology reference (VALIDATION_CLUSTER.md, "RoCE and InfiniBand"): DeepSeek-V3
# on four HGX H100 nodes, EP32 high-throughput All-to-All, on each fabric as catalogued and with a leaf per node
# (so that the All-to-All crosses the leaf uplinks). One line per run: fabric, mean step, All-to-All share of
# the step, dispatch and combine shares, TPOT mean and P99, output tok/s. Usage: bench/roce_vs_ib.sh [BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/sim/app/moesim}
S=scenarios/reference/topology_dsv3_4x8xh100_ep32.json
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
runs=(
  'ib-rail|"hgx-h100-8x400g"'
  'roce-fat-tree|"hgx-h100-roce-fat-tree"'
  'ib-fat-tree-leaf-per-node|{"base":"hgx-h100-8x400g","layout":"fat_tree","nodes_per_leaf_group":1,"oversubscription":2.0}'
  'roce-fat-tree-leaf-per-node|{"base":"hgx-h100-roce-fat-tree","nodes_per_leaf_group":1}'
)
for run in "${runs[@]}"; do
  name=${run%%|*}
  fabric=${run#*|}
  "$BIN" run "$S" -q --out "$OUT/run" --set "cluster.fabric=$fabric" >/dev/null
  python3 - "$name" "$OUT/run/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[2]))
s = r["step"]
sh = s["share"]
tpot = r["latency"]["tpot"]
print(sys.argv[1], "step %.2f ms" % (1e3 * s["mean_s"]), "a2a %.4f" % sh["all_to_all"],
      "dispatch %.4f combine %.4f" % (sh["dispatch"], sh["combine"]),
      "tpot %.2f ms p99 %.2f ms" % (1e3 * tpot["mean_s"], 1e3 * tpot["p99_s"]),
      "%.2f tok/s" % r["throughput"]["output_tokens_per_s"])
PY
done
