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
  scripts/response_queue.py --self-test
"""
import bisect
import csv
import os
import statistics
import sys


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
    """Each request's TTFT through the server (seconds), in arrival order.

    Two steps ending at 1 and 2 s with 3 and 2 decode sequences; request A (arrival 0.5) gets its first token
    from the first step, B (0.6) and C (1.5) from the second. At C = 0.1 s the first batch (3 decodes, then A)
    starts at 1.0 and ends at 1.4, A served at 1.4 (TTFT 0.9); the second (2 decodes, then B, then C) starts
    at 2.0, B served at 2.3 (1.7), C at 2.4 (0.9). At C = 0.3 the first batch ends at 2.2, so the second
    starts there: B at 2.2 + 3 x 0.3 = 3.1 (2.5), C at 3.4 (1.9).
    >>> data = ([(1.0, 3), (2.0, 2)], [(1.0, 0.5), (2.0, 0.6), (2.0, 1.5)], [0, 1, 1], [1, 2])
    >>> [round(x, 6) for x in ttfts(0.1, data)]
    [0.9, 1.7, 0.9]
    >>> [round(x, 6) for x in ttfts(0.3, data)]
    [1.7, 2.5, 1.9]
    >>> [round(x, 6) for x in ttfts(0.0, data)]
    [0.5, 1.4, 0.5]
    """
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
    if sys.argv[1:] == ["--self-test"]:
        import doctest
        failed, tried = doctest.testmod()
        print(f"{tried} doctests, {failed} failed")
        sys.exit(1 if failed or not tried else 0)
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    data = load(sys.argv[1])
    for c_us in map(float, sys.argv[2:]):
        p = statistics.quantiles([v * 1e3 for v in ttfts(c_us * 1e-6, data)], n=100, method="inclusive")
        print(f"C {c_us:g} us: TTFT P50 {p[49]:.0f} ms, P90 {p[89]:.0f} ms, P99 {p[98]:.0f} ms")


if __name__ == "__main__":
    main()
