#!/usr/bin/env python3
"""What a FIFO response server per replica would add to TTFT (VALIDATION_CLUSTER.md "The Server runs' response
path").

Reads a run's steps.csv and requests.csv (`moesim run <file> --steps-csv --requests-csv --out DIR`, one replica)
and replays every step's streamed responses through one server that spends C microseconds on each: a step
that ends at t hands over one response per sequence that produced a token (its decode sequences, then the
requests whose first token it produced, in arrival order, as an engine that lists requests in admission
order returns them); the server starts the batch at max(t, when it is free). A request's TTFT is then the
time its first response is served, less its arrival. Prints TTFT P50 / P90 / P99 in ms for each C.
Standard library only.

  scripts/response_queue.py DIR C_US [C_US ...]
"""
import bisect
import csv
import os
import sys


def percentile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def load(folder):
    steps = []
    with open(os.path.join(folder, "steps.csv")) as f:
        for r in csv.DictReader(f):
            if r["replica"] != "0":
                sys.exit("response_queue: one replica only (steps.csv has replica " + r["replica"] + ")")
            steps.append((float(r["start_s"]) + float(r["duration_s"]), int(r["decode_seqs"])))
    steps.sort()
    requests = []
    with open(os.path.join(folder, "requests.csv")) as f:
        for r in csv.DictReader(f):
            if r["dropped"] == "0":
                arrival = float(r["arrival_s"])
                requests.append((arrival + float(r["ttft_s"]), arrival))
    requests.sort(key=lambda x: x[1])
    ends = [s[0] for s in steps]
    step_of = [bisect.bisect_left(ends, first - 1e-9) for first, _ in requests]
    firsts = [0] * len(steps)
    for i in step_of:
        firsts[i] += 1
    return steps, requests, step_of, firsts


def ttfts(c, data):
    steps, requests, step_of, firsts = data
    free = 0.0
    start = [0.0] * len(steps)
    for i, (end, decode) in enumerate(steps):
        start[i] = max(end, free)
        free = start[i] + (decode + firsts[i]) * c
    served = [0] * len(steps)
    out = []
    for (_, arrival), i in zip(requests, step_of):
        served[i] += 1
        out.append(start[i] + (steps[i][1] + served[i]) * c - arrival)
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    data = load(sys.argv[1])
    for c_us in map(float, sys.argv[2:]):
        x = [v * 1e3 for v in ttfts(c_us * 1e-6, data)]
        print(f"C {c_us:g} us: TTFT P50 {percentile(x, 50):.0f} ms, P90 {percentile(x, 90):.0f} ms, "
              f"P99 {percentile(x, 99):.0f} ms")


if __name__ == "__main__":
    main()
