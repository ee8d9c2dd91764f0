#!/usr/bin/env bash
# Per-step cost against the number of replicas (BENCHMARKS.md "Fleet scale"): N replicas of the EP16 speed
# reference, 20 req/s each (the same step shape per replica), one thread. One Markdown row per replica count:
# - instructions per step (callgrind, repeatable on a shared machine) at the steady state: the difference
#   between runs of D2 and D1 simulated seconds (D1 after the reference's 60 s warm-up, D2 = D1 + W / N:
#   about the same number of steps for every N), divided by the difference in steps, so start-up (building N
#   planners) and the warm-up cancel;
# - CPU user time per step over a whole run of D simulated seconds (the same history for every replica
#   whatever N), less the start-up (a run of 1 ms), medians of 3 runs each: a difference of two close run
#   lengths, as for the instructions, drowns in the noise of a shared machine.
#   [INSTR=0] bench/fleet_scale.sh [moesim binary] [replica counts] [D1] [W] [D]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/sim/app/moesim}
COUNTS=${2:-"1 4 16 64"}
D1=${3:-60}
W=${4:-400}
D=${5:-120}
S=scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
args() {  # N DUR (the start-up run, 1 ms, without warm-up)
  local warmup=10
  [[ $2 == 0.001 ]] && warmup=0
  echo --set cluster.nodes=$((2 * $1)) --set workload.arrival.rate_per_s=$((20 * $1)) --set run.duration_s=$2 \
    --set run.warmup_s=$warmup --set run.max_drain_s=1
}
# Every step of the run, the warm-up and the drain included (report.json counts the window's): the rows of
# --steps-csv, which every run writes (a row costs a few microseconds, in both lengths alike).
steps() { echo $(($(wc -l <"$OUT/run/steps.csv") - 1)); }
instructions() {  # N DUR -> "instructions steps"
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg" "$BIN" run "$S" -q -j 1 --out "$OUT/run" --steps-csv \
    $(args "$1" "$2") >/dev/null 2>"$OUT/log"
  echo "$(awk '/^summary:/ {print $2}' "$OUT/cg") $(steps)"
}
user_median() {  # N DUR -> median user seconds of 3 runs
  for _ in 1 2 3; do
    /usr/bin/time -f "%U" -o "$OUT/time" "$BIN" run "$S" -q -j 1 --out "$OUT/run" --steps-csv $(args "$1" "$2") \
      >/dev/null
    cat "$OUT/time"
  done | sort -g | sed -n 2p
}
echo "| replicas | GPUs | steady window (simulated s) | steps in it | instructions per step | steps in $D s | CPU per step |"
echo "|---|---|---|---|---|---|---|"
for n in $COUNTS; do
  D2=$(python3 -c "print(f'{$D1 + $W / $n:g}')")
  i1=0 s1=0 i2=0 s2=1  # INSTR=0: CPU only (the instruction columns print 0)
  if [[ ${INSTR:-1} != 0 ]]; then
    read -r i1 s1 <<<"$(instructions "$n" "$D1")"
    read -r i2 s2 <<<"$(instructions "$n" "$D2")"
  fi
  u0=$(user_median "$n" 0.001)
  u=$(user_median "$n" "$D")
  s=$(steps)
  python3 -c "
i1, s1, i2, s2, u0, u, s = $i1, $s1, $i2, $s2, $u0, $u, $s
print(f'| $n | {16 * $n} | $D1 -> $D2 | {s2 - s1:,} | {(i2 - i1) / (s2 - s1) / 1e6:.3f} M | {s:,} | {1e6 * (u - u0) / s:.0f} us |')"
done
