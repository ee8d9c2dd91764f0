#!/usr/bin/env bash
# Run on a machine with an H200 (nvcc, CMake and Python there; no Eigen/JSON/Boost). From the repo root:
#   OUT=/some/dir hwmodels/cuda/run_on_device.sh [--quick]
# 1. builds the harness with nvcc alone, 2. checks every kernel against the harness's CPU loop on random
# inputs, 3. times the kernels over the grid (writes $OUT/kernels.csv), 4. prints and writes
# $OUT/compare_cublas.txt: our expert FFN against the cuBLAS figures in shared/calibration/h200, 5. times the
# grouped expert layer on every catalog expert shape (grouped_experts_sweep.py, PyTorch) into $OUT/grouped,
# 6. times each op of one Mixtral-8x7B decode layer (layer_ops_sweep.py, PyTorch) into $OUT/layer_ops.
# Afterwards, on any machine: moesim calibrate --fit ../shared/calibration/h200/*.json $OUT/kernels.csv ...
set -euo pipefail
OUT=${OUT:-out/calibration}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${SHARED_DIR:-}
for d in "$ROOT/shared" "$ROOT/../shared"; do
  if [[ -z "$SHARED" && -d "$d/calibration/h200" ]]; then SHARED=$d; fi
done

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/nvidia_smi.txt" || true
nvcc --version | tail -2
time nvcc -O3 -std=c++17 -arch=sm_90 -I"$ROOT" "$ROOT/hwmodels/cuda/calibrate_harness.cu" -o "$OUT/calibrate_harness"

"$OUT/calibrate_harness" --csv "$OUT/kernels.csv" "$@" 2>&1 | tee "$OUT/harness.log"

if [[ -n "$SHARED" ]]; then
  python3 - "$OUT/kernels.csv" "$SHARED/calibration/h200/expert_ffn_bf16.json" <<'PY' | tee "$OUT/compare_cublas.txt"
import csv, json, sys
ours = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r["kernel"] == "expert_ffn":
        key = (r["precision"], int(r["hidden"]), int(r["inter"]), int(r["tokens_per_expert"]))
        ours[key] = float(r["median_us"]) / int(r["experts"])
ref = json.load(open(sys.argv[2]))
print("expert FFN, us per expert: ours (moesim reference kernel) vs cuBLAS/PyTorch (shared/calibration/h200)")
print(f"{'shape':<28}{'T':>6}{'cuBLAS bf16':>13}{'ours bf16':>11}{'ratio':>8}{'ours fp8':>10}{'ratio':>8}")
for name, s in ref["shapes"].items():
    h, i = s["hidden"], s["inter"]
    for row in s["rows"]:
        t = row["T"]; cub = row["ffn_ms"] * 1e3
        b = ours.get(("bf16", h, i, t)); f = ours.get(("fp8", h, i, t))
        fmt = lambda v: f"{v:10.1f}" if v is not None else f"{'-':>10}"
        rat = lambda v: f"{v / cub:8.2f}" if v is not None else f"{'-':>8}"
        print(f"{name + f' H={h} I={i}':<28}{t:>6}{cub:13.1f} {fmt(b)}{rat(b)}{fmt(f)}{rat(f)}")
PY
else
  echo "shared/calibration/h200 not found: no cuBLAS comparison (set SHARED_DIR)"
fi
# The grouped expert kernel (torch._grouped_mm, what the engines run) on every catalog expert shape, as
# moe_layer_<model>_ep<N>.json files beside the shared ones.
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  python3 "$ROOT/hwmodels/cuda/grouped_experts_sweep.py" --out "$OUT/grouped" 2>&1 | tee "$OUT/grouped.log"
  # Each op of one Mixtral decode layer alone, its kernel count, the whole layer and the grouped experts by
  # touched count (VALIDATION.md, "What the fitted constant stood for"; CALIBRATION.md).
  python3 "$ROOT/hwmodels/cuda/layer_ops_sweep.py" --out "$OUT/layer_ops" 2>&1 | tee "$OUT/layer_ops.log"
else
  echo "no PyTorch with CUDA here: grouped-expert and layer-op sweeps skipped"
fi
echo "results in $OUT; then, on any machine:"
echo "  moesim calibrate --fit ../shared/calibration/h200/*.json $OUT/kernels.csv $OUT/grouped/moe_layer_*.json --leave-out all --dry-run"
