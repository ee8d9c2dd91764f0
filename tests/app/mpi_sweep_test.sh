#!/bin/sh
# Tiny sweeps (two axes, two seeds per point, points that fail; then a capacity search per point) run by
# one process and by `mpirun -np 2`: sweep.csv and sweep.json must be equal byte for byte.
# Usage: mpi_sweep_test.sh MPIRUN MOESIM WORKDIR
set -eu
mpirun="$1"
moesim="$2"
work="$3"
rm -rf "$work"
mkdir -p "$work"
# deepseek-v3 does not fit on the tiny scenario's 4 H100s: those points are rows with their error.
args="sweep scenarios/tiny/tiny_poisson_ep4.json --set model=qwen3-30b-a3b,deepseek-v3
      --set workload.arrival.rate_per_s=20,40 --set run.requests=60 --seeds 2 -j 1"
# shellcheck disable=SC2086
"$moesim" $args --out "$work/one" >"$work/one.stdout" 2>"$work/one.stderr"
# shellcheck disable=SC2086
"$mpirun" --allow-run-as-root --oversubscribe -np 2 "$moesim" $args --out "$work/two" \
  >"$work/two.stdout" 2>"$work/two.stderr" || { cat "$work/two.stderr"; exit 1; }
grep -q "rank 1 " "$work/two.stderr" || { echo "rank 1 ran no point:"; cat "$work/two.stderr"; exit 1; }
grep -q "error" "$work/one/sweep.csv" || { echo "the failing point is not a row with its error"; exit 1; }
for f in sweep.csv sweep.json; do
  cmp "$work/one/$f" "$work/two/$f" || { echo "$f differs between one process and two ranks"; exit 1; }
done
# The capacity search too: its bracket and the reports at capacity cross the ranks unchanged.
cap="sweep scenarios/tiny/tiny_poisson_ep4.json --set deployment.max_batch_size=8,32 --set run.requests=0
     --set run.duration_s=3 --set run.warmup_s=0.5 --capacity --capacity-tol 0.2 -j 1"
# shellcheck disable=SC2086
"$moesim" $cap --out "$work/cap-one" >/dev/null 2>"$work/cap-one.stderr"
# shellcheck disable=SC2086
"$mpirun" --allow-run-as-root --oversubscribe -np 2 "$moesim" $cap --out "$work/cap-two" \
  >/dev/null 2>"$work/cap-two.stderr" || { cat "$work/cap-two.stderr"; exit 1; }
grep -q "capacity_req_s" "$work/cap-one/sweep.csv" || { echo "no capacity column"; exit 1; }
for f in sweep.csv sweep.json; do
  cmp "$work/cap-one/$f" "$work/cap-two/$f" || { echo "capacity $f differs between 1 process and 2 ranks"; exit 1; }
done
echo "sweep.csv and sweep.json are equal for 1 process and 2 ranks (replications and capacity)"
