#!/usr/bin/env bash
# Scaling curves of `moesim run` (BENCHMARKS.md, "Targets and where they stand"): CPU and wall time against the number of GPUs
# (replicas of the EP16 speed reference, 20 req/s each), against the number of requests (one replica, longer
# runs) and against threads (--jobs). Prints Markdown tables; one run per row (compare rows of one
# invocation: the machine is shared).
#
#   bench/scaling.sh [moesim binary] [sections]     sections: any of gpus requests threads million (default:
#                                                   the first three; `million` is one million requests on
#                                                   1,024 GPUs, minutes of CPU)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/sim/app/moesim}
SECTIONS=${2:-"gpus requests threads"}
S=scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# run NAME JOBS ARGS...: one row with wall, user, peak RSS and the report's figures.
run() {
  local name=$1 jobs=$2
  shift 2
  /usr/bin/time -f "%e %U %M" -o "$OUT/time" "$BIN" run "$S" -q -j "$jobs" --out "$OUT/run" "$@" >/dev/null
  read -r wall user kb <"$OUT/time"
  python3 - "$OUT/run/report.json" "$name" "$jobs" "$wall" "$user" "$kb" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
name, jobs, wall, user, kb = sys.argv[2:7]
steps, reqs = r["step"]["count"], r["requests"]["arrived"]
print(f"| {name} | {jobs} | {reqs:,} | {steps:,} | {float(wall):.2f} s | {float(user):.2f} s | "
      f"{1e6 * float(user) / steps:.0f} us | {int(kb) / 1024:.0f} MB | {r['load']['overloaded']} |")
PY
}
header() {
  echo
  echo "$1"
  echo
  echo "| run | threads | requests | steps | wall | user | user per step | peak RSS | overloaded |"
  echo "|---|---|---|---|---|---|---|---|---|"
}

for section in $SECTIONS; do
  case $section in
    gpus)
      header "GPUs: replicas of EP16 at 20 req/s each, 120 simulated s, one thread"
      for nodes in 2 8 32 128; do
        run "$((nodes * 8)) GPUs" 1 --set cluster.nodes=$nodes --set workload.arrival.rate_per_s=$((nodes * 10)) \
          --set run.duration_s=120 --set run.warmup_s=20
      done
      ;;
    requests)
      header "Requests: one EP16 replica at 20 req/s, longer runs, one thread"
      for d in 450 900 1800 3600; do run "${d} s" 1 --set run.duration_s=$d; done
      ;;
    threads)
      header "Threads: 16 replicas (256 GPUs) at 320 req/s, 120 simulated s"
      for j in 1 2; do
        run "256 GPUs" $j --set cluster.nodes=32 --set workload.arrival.rate_per_s=320 --set run.duration_s=120 \
          --set run.warmup_s=20
      done
      ;;
    million)
      header "One million requests on 1,024 GPUs (64 replicas at 1,280 req/s for 781.25 s)"
      run "1,024 GPUs" "${JOBS:-0}" --set cluster.nodes=128 --set workload.arrival.rate_per_s=1280 \
        --set run.duration_s=781.25 --set run.warmup_s=60
      ;;
    *) echo "unknown section $section" >&2; exit 2 ;;
  esac
done
