#!/usr/bin/env python3
"""A measured dataset's token lengths as a `{"kind": "quantiles"}` length law (README, workload).

Reads a CSV with one row per sample and prints the law of one column: the 0, 1/(n-1), ..., 1 quantiles
(linear between order statistics), rounded to tokens, each at most --cap (a serving limit such as a maximum
output length), and the law's mean beside the capped data's. Standard library only.

  scripts/length_quantiles.py FILE COLUMN [--points 101] [--cap TOKENS]
  scripts/length_quantiles.py --self-test
"""
import argparse
import csv
import json
import statistics
import sys


def law(xs, n, cap=None):
    """The n quantile points of the lengths xs (capped), min to max, linear between order statistics.

    Five samples 1..5 at three points are the min, the median and the max; at five points every sample. Ten
    samples 1..10 at three points: the median lies halfway between 5 and 6 (5.5, rounded to even: 6). A cap of
    3 moves 4 and 5 to 3.
    >>> law([5, 1, 4, 2, 3], 3)
    [1, 3, 5]
    >>> law([5, 1, 4, 2, 3], 5)
    [1, 2, 3, 4, 5]
    >>> law(list(range(1, 11)), 3)
    [1, 6, 10]
    >>> law([5, 1, 4, 2, 3], 5, cap=3)
    [1, 2, 3, 3, 3]
    """
    xs = sorted(xs if cap is None else [min(x, cap) for x in xs])
    # "inclusive": linear between order statistics, the cut points between min and max
    inner = statistics.quantiles(xs, n=n - 1, method="inclusive")
    return [max(1, round(x)) for x in [xs[0], *inner, xs[-1]]]


def main():
    if sys.argv[1:] == ["--self-test"]:
        import doctest
        failed, tried = doctest.testmod()
        print(f"{tried} doctests, {failed} failed")
        sys.exit(1 if failed or not tried else 0)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("column")
    ap.add_argument("--points", type=int, default=101)
    ap.add_argument("--cap", type=int, default=None)
    a = ap.parse_args()
    with open(a.file) as f:
        xs = [int(r[a.column]) for r in csv.DictReader(f)]
    if a.cap is not None:
        xs = [min(x, a.cap) for x in xs]
    n = a.points
    points = law(xs, n)
    law_mean = sum(0.5 * (points[i] + points[i + 1]) for i in range(n - 1)) / (n - 1)
    print(json.dumps({"kind": "quantiles", "points": points}, separators=(", ", ": ")))
    print(f"# {len(xs)} samples, mean {statistics.mean(xs):.1f}; the law's mean {law_mean:.1f}")


if __name__ == "__main__":
    main()
