#!/usr/bin/env python3
"""Rerun every published cluster figure of docs/validation/rows.json and print where each row stands.

Each row is one `moesim run` (or `moesim plan`) of a committed scenario with its --set overrides and options,
one value read from its report.json (plan.json), and the figure it is compared with. The table (published,
ours, ratio ours / published, band, wall seconds, the VALIDATION_CLUSTER.md section that explains the gap)
is what VALIDATION_CLUSTER.md "Where each row stands" holds. Standard library only.

  scripts/cluster_rows.py [-j N] [--moesim PATH] [--only ID,...] [--skip-slow] [--json FILE]
  scripts/cluster_rows.py --list | --check | --self-test
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = os.path.join(ROOT, "docs", "validation", "rows.json")
DOC = os.path.join(ROOT, "VALIDATION_CLUSTER.md")
VERBS = ("run", "plan")
OPTIONS = {"run": {"--capacity": 0, "--seed": 1}, "plan": {"--context": 1}}  # allowed options, their arity
ROW_KEYS = {"id", "label", "scenario", "verb", "set", "options", "metric", "published", "unit", "source",
            "section"}
METRIC_KEYS = {"path", "times", "divided_by", "divided_by_path", "inverse"}
SEGMENT = re.compile(r"([A-Za-z_]\w*)(?:\[([^\]]+)\])?")


def band(ratio):
    """The band of issue 28's acceptance for ours / published: within 15%, within 1.5x either way, beyond.

    >>> [band(r) for r in (1.0, 1.15, 0.85, 1.1501, 0.8499)]
    ['within 15%', 'within 15%', 'within 15%', 'within 1.5x', 'within 1.5x']
    >>> [band(r) for r in (1.5, 1 / 1.5, 1.5001, 0.6666, 2.0, 0.5, 0.0)]
    ['within 1.5x', 'within 1.5x', 'beyond 1.5x', 'beyond 1.5x', 'beyond 1.5x', 'beyond 1.5x', 'beyond 1.5x']
    """
    eps = 1e-9  # 0.85 - 1 is -0.15000000000000002 in binary floating point
    if ratio <= 0:
        return "beyond 1.5x"
    if abs(ratio - 1) <= 0.15 + eps:
        return "within 15%"
    if max(ratio, 1 / ratio) <= 1.5 + eps:
        return "within 1.5x"
    return "beyond 1.5x"


def parse_path(path):
    """Segments of a report path: names, each optionally with [index] or [key=value,...] for a list.

    >>> parse_path("loadgen.tokens_per_s")
    [('loadgen', None), ('tokens_per_s', None)]
    >>> parse_path("throughput[phase=decode,batch=256].step_s")
    [('throughput', 'phase=decode,batch=256'), ('step_s', None)]
    >>> parse_path("a..b")
    Traceback (most recent call last):
    ValueError: bad report path 'a..b'
    """
    parts = path.split(".")
    segments = [SEGMENT.fullmatch(p) for p in parts]
    if not path or not all(segments):
        raise ValueError(f"bad report path {path!r}")
    return [(m.group(1), m.group(2)) for m in segments]


def lookup(doc, path):
    """The number at `path` in a report; KeyError naming the first missing part.

    >>> r = {"a": {"b": 2.5}, "t": [{"phase": "decode", "batch": 8, "s": 1}, {"phase": "prefill", "batch": 256, "s": 3}]}
    >>> lookup(r, "a.b"), lookup(r, "t[batch=256].s"), lookup(r, "t[0].s")
    (2.5, 3, 1)
    >>> lookup(r, "a.c")
    Traceback (most recent call last):
    KeyError: "no 'c' under 'a' (keys: b)"
    >>> lookup(r, "t[batch=9].s")
    Traceback (most recent call last):
    KeyError: "no element of 't' with batch=9"
    """
    node, seen = doc, []
    for name, select in parse_path(path):
        where = ".".join(seen) or "the top level"
        if not isinstance(node, dict) or name not in node:
            keys = ", ".join(sorted(node)) if isinstance(node, dict) else type(node).__name__
            raise KeyError(f"no {name!r} under {where!r} (keys: {keys})")
        node = node[name]
        seen.append(name if select is None else f"{name}[{select}]")
        if select is None:
            continue
        if not isinstance(node, list):
            raise KeyError(f"{name!r} is not a list")
        if select.isdigit():
            if int(select) >= len(node):
                raise KeyError(f"{name!r} has {len(node)} elements, not {int(select) + 1}")
            node = node[int(select)]
            continue
        want = dict(kv.split("=", 1) for kv in select.split(","))
        hits = [e for e in node if all(str(e.get(k)) == v for k, v in want.items())]
        if len(hits) != 1:
            raise KeyError(f"no element of {name!r} with {select}" if not hits else
                           f"{len(hits)} elements of {name!r} with {select}")
        node = hits[0]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise KeyError(f"{path!r} is not a number")
    return node


def ours(metric, report):
    """The row's figure: the value at `path` (or its inverse) x times / divided_by / the value at divided_by_path.

    >>> ours({"path": "l.t", "divided_by": 8}, {"l": {"t": 800.0}})
    100.0
    >>> ours({"path": "s.tok", "divided_by_path": "s.s", "divided_by": 4}, {"s": {"tok": 524288, "s": 2.0}})
    65536.0
    >>> ours({"path": "tpot", "inverse": True}, {"tpot": 0.05}), ours({"path": "s", "times": 1000}, {"s": 0.0975})
    (20.0, 97.5)
    """
    value = lookup(report, metric["path"])
    if metric.get("inverse"):
        value = 1 / value
    value = value * metric.get("times", 1) / metric.get("divided_by", 1)
    if "divided_by_path" in metric:
        value /= lookup(report, metric["divided_by_path"])
    return value


def headings():
    with open(DOC, encoding="utf-8") as f:
        return [line[3:].strip() for line in f if line.startswith("## ")]


def anchor(heading):
    """GitHub's anchor for a heading.

    >>> anchor("MLPerf Server rows (2026-12-03, later)")
    'mlperf-server-rows-2026-12-03-later'
    >>> anchor("SGLang's prefill on H100 (2026-12-03): 1.5x optimistic")
    'sglangs-prefill-on-h100-2026-12-03-15x-optimistic'
    """
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def problems(row, known_sections):
    """What is wrong with one rows.json entry (an empty list when it is well-formed)."""
    out = []
    if not isinstance(row, dict):
        return ["not an object"]
    out += [f"unknown key {k!r}" for k in sorted(set(row) - ROW_KEYS)]
    out += [f"missing key {k!r}" for k in ("id", "label", "scenario", "metric", "published", "unit", "source",
                                           "section") if k not in row]
    if not re.fullmatch(r"[a-z0-9_]+", str(row.get("id", ""))):
        out.append("id must be lower-case letters, digits and underscores")
    verb = row.get("verb", "run")
    if verb not in VERBS:
        out.append(f"verb {verb!r} is not one of {', '.join(VERBS)}")
        verb = "run"
    if not os.path.isfile(os.path.join(ROOT, str(row.get("scenario", "")))):
        out.append(f"scenario {row.get('scenario')!r} does not exist")
    sets = row.get("set", [])
    if not isinstance(sets, list) or not all(isinstance(s, str) and "=" in s for s in sets):
        out.append("set must be a list of 'path=value' strings")
    options, allowed = row.get("options", []), OPTIONS.get(verb, {})
    i = 0
    while isinstance(options, list) and i < len(options):
        if options[i] not in allowed or i + allowed[options[i]] > len(options) - 1:
            out.append(f"option {options[i]!r} is not allowed for {verb} or lacks its value "
                       f"(allowed: {', '.join(allowed)})")
            break
        i += 1 + allowed[options[i]]
    metric = row.get("metric")
    if not isinstance(metric, dict) or "path" not in metric or set(metric) - METRIC_KEYS:
        out.append(f"metric must be an object with 'path' and at most {', '.join(sorted(METRIC_KEYS))}")
    else:
        for key in ("path", "divided_by_path"):
            try:
                if key in metric:
                    parse_path(metric[key])
            except ValueError as e:
                out.append(f"metric.{key}: {e}")
        for key in ("times", "divided_by"):
            if key in metric and not (isinstance(metric[key], (int, float)) and metric[key] > 0):
                out.append(f"metric.{key} must be a positive number")
    published = row.get("published")
    if isinstance(published, bool) or not isinstance(published, (int, float)) or not published > 0:
        out.append("published must be a positive number")
    if "section" in row and row["section"] not in known_sections:
        out.append(f"section {row['section']!r} is not a '## ' heading of VALIDATION_CLUSTER.md")
    return out


def load(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    rows = doc.get("rows", [])
    known, seen, bad = headings(), set(), []
    for n, row in enumerate(rows):
        name = f"rows.json entry {n + 1} ({row.get('id', 'no id') if isinstance(row, dict) else '?'})"
        bad += [f"{name}: {p}" for p in problems(row, known)]
        if isinstance(row, dict) and row.get("id") in seen:
            bad.append(f"{name}: id used twice")
        seen.add(row.get("id") if isinstance(row, dict) else None)
    for n, item in enumerate(doc.get("not_covered", [])):
        if not isinstance(item, dict) or set(item) != {"figure", "source", "why"}:
            bad.append(f"rows.json not_covered entry {n + 1}: needs exactly the keys figure, source, why")
    return doc, bad


def base_command(row, moesim):
    """The moesim command line of a row, without where it writes."""
    cmd = [moesim, row.get("verb", "run"), row["scenario"]]
    cmd += [a for s in row.get("set", []) for a in ("--set", s)] + row.get("options", [])
    return cmd + (["-j", "1"] if row.get("verb", "run") == "run" else [])


def output_file(row):
    """What the metric's path reads: plan.json, replications.json (a capacity search) or report.json."""
    if row.get("verb", "run") == "plan":
        return "plan.json"
    return "replications.json" if "--capacity" in row.get("options", []) else "report.json"


def command(row, moesim, out_dir):
    if row.get("verb", "run") == "plan":
        return base_command(row, moesim) + ["-q", "--json", os.path.join(out_dir, "plan.json")]
    return base_command(row, moesim) + ["-q", "--out", out_dir]


def key(row):
    """Rows that run the same command share one run."""
    return (row.get("verb", "run"), row["scenario"], tuple(row.get("set", [])), tuple(row.get("options", [])))


def execute(row, moesim):
    """Run one row's command; (report dict or None, wall seconds, error text or None)."""
    with tempfile.TemporaryDirectory(prefix="cluster_rows_") as out_dir:
        start = time.monotonic()
        proc = subprocess.run(command(row, moesim, out_dir), cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            return None, wall, f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
        with open(os.path.join(out_dir, output_file(row)), encoding="utf-8") as f:
            return json.load(f), wall, None


def fmt(value):
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def table(results):
    lines = ["| row | published | ours | ratio | band | wall s | section |", "|---|---|---|---|---|---|---|"]
    for r in results:
        published = f"{r['published']:,} {r['unit']}"
        section = f"[{r['section']}](#{anchor(r['section'])})"
        if r["error"]:
            lines.append(f"| {r['label']} | {published} | failed | | | {r['wall_s']:.1f} | {section} |")
            continue
        lines.append(f"| {r['label']} | {published} | {fmt(r['ours'])} | {r['ratio']:.3f} | {r['band']} | "
                     f"{r['wall_s']:.1f} | {section} |")
    counts = {b: sum(r["band"] == b for r in results) for b in ("within 15%", "within 1.5x", "beyond 1.5x")}
    summary = "; ".join(f"{b}: {n}" for b, n in counts.items())
    failed = sum(bool(r["error"]) for r in results)
    return "\n".join(lines) + f"\n\n{len(results)} rows. {summary}" + (f"; failed: {failed}" if failed else "")


def provenance(moesim):
    try:
        version = subprocess.run([moesim, "--version"], capture_output=True, text=True).stdout.strip()
        tree = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return f"moesim {moesim}"
    return f"moesim {moesim} ({version}), tree {tree or 'unknown'}"


def check(rows, moesim, jobs):
    """moesim validate on every distinct scenario + --set list; the messages of those it refuses."""
    def validate(row):
        cmd = [moesim, "validate", row["scenario"]] + [a for s in row.get("set", []) for a in ("--set", s)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        return None if proc.returncode == 0 else f"{row['id']}: moesim validate refuses it: {proc.stderr.strip()}"
    distinct = {(r["scenario"], tuple(r.get("set", []))): r for r in rows}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return [m for m in pool.map(validate, distinct.values()) if m]


def measure(rows, moesim, jobs, shown_as):
    """Run the rows (each distinct command once, the capacity searches first) and read each row's figure."""
    runs = {}
    for r in rows:
        runs.setdefault(key(r), r)
    order = sorted(runs, key=lambda k: "--capacity" not in k[3])
    done = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(execute, runs[k], moesim): k for k in order}
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            k = futures[future]
            done[k] = future.result()
            print(f"[{n}/{len(runs)}] {runs[k]['id']}: {done[k][1]:.1f} s" +
                  (f" FAILED {done[k][2]}" if done[k][2] else ""), file=sys.stderr, flush=True)
    results = []
    for r in rows:
        report, wall, error = done[key(r)]
        value = None
        if error is None:
            try:
                value = ours(r["metric"], report)
            except (KeyError, ZeroDivisionError) as e:
                error = f"{r['id']}: {output_file(r)}: {e.args[0] if isinstance(e, KeyError) else e}"
        ratio = value / r["published"] if value is not None else None
        results.append({"id": r["id"], "label": r["label"], "published": r["published"], "unit": r["unit"],
                        "ours": value, "ratio": ratio, "band": None if ratio is None else band(ratio),
                        "wall_s": round(wall, 1), "section": r["section"], "source": r["source"],
                        "command": shlex.join(base_command(r, shown_as)), "error": error})
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moesim", default="build/sim/app/moesim", help="the binary (default %(default)s)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="moesim processes at once (each -j 1)")
    parser.add_argument("--only", help="comma-separated row ids")
    parser.add_argument("--skip-slow", action="store_true", help="leave out the capacity searches")
    parser.add_argument("--list", action="store_true", help="print each row's id and command, run nothing")
    parser.add_argument("--check", action="store_true", help="check rows.json and moesim validate each row")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--rows", default=ROWS, help=argparse.SUPPRESS)
    parser.add_argument("--self-test", action="store_true", help="run the doctests of the band and path logic")
    args = parser.parse_args()
    if args.self_test:
        import doctest
        failed, tried = doctest.testmod()
        print(f"{tried} doctests, {failed} failed")
        return 1 if failed else 0
    moesim = os.path.abspath(args.moesim)
    doc, bad = load(args.rows)
    if bad:
        print("\n".join(["cluster_rows: rows.json is not well-formed:"] + bad), file=sys.stderr)
        return 2
    rows = doc["rows"]
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if w not in {r["id"] for r in rows}]
        if unknown:
            print(f"cluster_rows: no row with id {', '.join(unknown)} (see --list)", file=sys.stderr)
            return 2
        rows = [r for r in rows if r["id"] in wanted]
    if args.skip_slow:
        rows = [r for r in rows if "--capacity" not in r.get("options", [])]
    if args.list:
        for r in rows:
            print(f"{r['id']}: {r['label']}\n  {shlex.join(base_command(r, args.moesim))}")
        return 0
    if not os.access(moesim, os.X_OK):
        print(f"cluster_rows: {args.moesim} is not an executable moesim (build it or pass --moesim)",
              file=sys.stderr)
        return 2
    if args.check:
        refused = check(rows, moesim, max(1, args.jobs))
        print("\n".join(refused) if refused else f"{len(rows)} rows well-formed, each scenario accepted by "
                                                  "moesim validate", file=sys.stderr if refused else sys.stdout)
        return 1 if refused else 0
    results = measure(rows, moesim, args.jobs, args.moesim)
    print(provenance(moesim) + "\n\n" + table(results))
    if not args.only and doc.get("not_covered"):
        print("\nNot run (rows.json `not_covered`):\n" +
              "\n".join(f"- {n['figure']} ({n['source']}): {n['why']}" for n in doc["not_covered"]))
    for r in results:
        if r["error"]:
            print(f"cluster_rows: {r['error']}", file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"provenance": provenance(moesim), "rows": results}, f, indent=1)
            f.write("\n")
    return 1 if any(r["error"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
