#!/usr/bin/env python3
"""A measured dataset's token lengths as a `{"kind": "quantiles"}` length law (README, workload).

Reads a CSV with one row per sample and prints the law of one column: the 0, 1/(n-1), ..., 1 quantiles
(linear between order statistics), rounded to tokens, each at most --cap (a serving limit such as a maximum
output length), and the law's mean beside the capped data's. Standard library only.

  scripts/length_quantiles.py FILE COLUMN [--points 101] [--cap TOKENS]
"""
import argparse
import csv
import json
import statistics


def quantile(sorted_xs, q):
    k = (len(sorted_xs) - 1) * q
    f = int(k)
    c = min(f + 1, len(sorted_xs) - 1)
    return sorted_xs[f] + (sorted_xs[c] - sorted_xs[f]) * (k - f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("column")
    ap.add_argument("--points", type=int, default=101)
    ap.add_argument("--cap", type=int, default=None)
    a = ap.parse_args()
    with open(a.file) as f:
        xs = sorted(int(r[a.column]) for r in csv.DictReader(f))
    if a.cap is not None:
        xs = [min(x, a.cap) for x in xs]
    n = a.points
    points = [max(1, round(quantile(xs, i / (n - 1)))) for i in range(n)]
    law_mean = sum(0.5 * (points[i] + points[i + 1]) for i in range(n - 1)) / (n - 1)
    print(json.dumps({"kind": "quantiles", "points": points}, separators=(", ", ": ")))
    print(f"# {len(xs)} samples, mean {statistics.mean(xs):.1f}; the law's mean {law_mean:.1f}")


if __name__ == "__main__":
    main()
