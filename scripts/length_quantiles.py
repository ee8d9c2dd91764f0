#!/usr/bin/env python3
"""A measured dataset's token lengths as a `{"kind": "quantiles"}` length law (README, workload).

Reads a CSV with one row per sample and prints the law of one column: the 0, 1/(n-1), ..., 1 quantiles
(linear between order statistics), rounded to tokens, each at most --cap (a serving limit such as a maximum
output length), and the law's mean beside the capped data's. With --scale, takes a law already made (the
`KEY` object of a JSON file) and prints it with every point multiplied by the one factor k that gives the law
the mean --mean, each point at most --cap: the same shape at another mean (a model whose outputs run shorter
than the dataset's references, as a serving system's logged tokens per query say). Standard library only.

  scripts/length_quantiles.py FILE COLUMN [--points 101] [--cap TOKENS]
  scripts/length_quantiles.py --scale LAW.json KEY --mean TOKENS [--cap TOKENS]
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


def law_mean(points):
    """The mean of a quantile law: linear between its points, each interval of equal probability.

    >>> law_mean([10, 20, 30])
    20.0
    """
    n = len(points)
    return sum(0.5 * (points[i] + points[i + 1]) for i in range(n - 1)) / (n - 1)


def scale_to_mean(points, mean, cap=None):
    """(k, points times k, rounded, each at most cap): k solves law_mean(min(k x, cap)) = mean before rounding.

    Doubling [10, 20, 30] doubles its mean, 20. Under a cap of 50 the top point stops there, so k solves
    ((10k + 20k) / 2 + (20k + 50) / 2) / 2 = 40: 12.5 k + 12.5 = 40, k = 2.2.
    >>> scale_to_mean([10, 20, 30], 40)
    (2.0, [20, 40, 60])
    >>> k, p = scale_to_mean([10, 20, 30], 40, cap=50)
    >>> round(k, 9), p, law_mean(p)
    (2.2, [22, 44, 50], 40.0)
    """
    def scaled(k):
        return [k * x if cap is None else min(k * x, cap) for x in points]

    lo, hi = 0.0, 1.0
    while law_mean(scaled(hi)) < mean:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if law_mean(scaled(mid)) < mean else (lo, mid)
    k = 0.5 * (lo + hi)
    return k, [max(1, round(x)) for x in scaled(k)]


def main():
    if sys.argv[1:] == ["--self-test"]:
        import doctest
        failed, tried = doctest.testmod()
        print(f"{tried} doctests, {failed} failed")
        sys.exit(1 if failed or not tried else 0)
    if sys.argv[1:2] == ["--scale"]:
        sp = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        sp.add_argument("--scale", nargs=2, metavar=("LAW_JSON", "KEY"), required=True)
        sp.add_argument("--mean", type=float, required=True)
        sp.add_argument("--cap", type=int, default=None)
        a = sp.parse_args()
        with open(a.scale[0]) as f:
            points = json.load(f)[a.scale[1]]["points"]
        k, scaled = scale_to_mean(points, a.mean, a.cap)
        print(json.dumps({"kind": "quantiles", "points": scaled}, separators=(", ", ": ")))
        print(f"# k {k:.4f}: the law's mean {law_mean(scaled):.1f} (from {law_mean(points):.1f})")
        return
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
    print(json.dumps({"kind": "quantiles", "points": points}, separators=(", ", ": ")))
    print(f"# {len(xs)} samples, mean {statistics.mean(xs):.1f}; the law's mean {law_mean(points):.1f}")


if __name__ == "__main__":
    main()
