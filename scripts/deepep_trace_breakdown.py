#!/usr/bin/env python3
"""Per-layer breakdown of DeepEP low-latency decode in SGLang PyTorch-profiler traces (Chrome JSON, .gz ok).

Reads one or more ranks' traces of the same run (NVIDIA's shifangx/Scripts-SGLang logs_gb200_blog2_fp4/*/...
-TP-k-DP-k-EP-k.trace.json.gz) and prints, per rank, each MoE layer's send and receive kernels of the
dispatch and of the combine (SGLang launches the two phases as two kernels), the grouped expert GEMMs, the
attention side between layers, and each step's sums; with two ranks, how far their phases start and end
apart (the traces share a host clock). VALIDATION_CLUSTER.md, "SGLang's GB200 All-to-All against NVIDIA's
trace", reads its output. Standard library only.

  scripts/deepep_trace_breakdown.py RANK0.trace.json.gz [RANK1.trace.json.gz]
"""
import gzip
import json
import statistics as st
import sys


def kind(name):
    if "deep_ep" in name and "combine" in name:
        return "combine"
    if "deep_ep" in name and "dispatch" in name:
        return "dispatch"
    if "BlockScaledPersistentDenseGemm" in name:
        return "expert_gemm"
    if "cvt_fp16_to_fp4_expert" in name:
        return "expert_quant"
    if "moe_fused_gate" in name:
        return "gate"
    return None


def moe_layers(path):
    """Kernels in time order, grouped into MoE layers from each gate (top-k) kernel."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    layers = []
    for e in kernels:
        k = kind(e["name"])
        if k == "gate":
            layers.append({"gate": e, "dispatch": [], "combine": [], "expert_gemm": [], "expert_quant": []})
        elif k is not None and layers:
            layers[-1][k].append(e)
    return [l for l in layers if len(l["dispatch"]) == 2 and len(l["combine"]) == 2]


def end(e):
    return e["ts"] + e["dur"]


def summary(v):
    v = sorted(v)
    n = len(v)
    return "mean %7.1f  sd %6.1f  min %7.1f  p10 %7.1f  p50 %7.1f  p90 %7.1f  max %7.1f" % (
        st.mean(v), st.pstdev(v), v[0], v[n // 10], v[n // 2], v[9 * n // 10], v[-1])


def report(rank, layers, per_step):
    print("rank %d: %d MoE layers (%d steps of %d)" % (rank, len(layers), len(layers) // per_step, per_step))
    rows = {
        "dispatch send": [l["dispatch"][0]["dur"] for l in layers],
        "dispatch recv": [l["dispatch"][1]["dur"] for l in layers],
        "expert GEMMs": [sum(e["dur"] for e in l["expert_gemm"]) for l in layers],
        "expert quant": [sum(e["dur"] for e in l["expert_quant"]) for l in layers],
        "recv end -> combine": [l["combine"][0]["ts"] - end(l["dispatch"][1]) for l in layers],
        "combine send": [l["combine"][0]["dur"] for l in layers],
        "combine recv": [l["combine"][1]["dur"] for l in layers],
        "attention side": [layers[i]["dispatch"][0]["ts"] - end(layers[i - 1]["combine"][1])
                           for i in range(1, len(layers)) if i % per_step != 0],
    }
    for name, v in rows.items():
        print("  %-20s us  %s" % (name, summary(v)))
    gemm, send = rows["expert GEMMs"], rows["combine send"]
    fit = st.linear_regression(gemm, send)
    print("  combine send against expert GEMMs: r %.3f, send = %.3f x GEMMs %+.1f us"
          % (st.correlation(gemm, send), fit.slope, fit.intercept))
    means = [st.mean(gemm[s * per_step + j] for s in range(len(layers) // per_step)) for j in range(per_step)]
    within = [st.pstdev([gemm[s * per_step + j] for s in range(len(layers) // per_step)]) for j in range(per_step)]
    print("  expert GEMMs: sd over layers of each layer's mean %.1f us, mean sd of a layer over steps %.1f us"
          % (st.pstdev(means), st.mean(within)))
    for s in range(len(layers) // per_step):
        ls = layers[s * per_step:(s + 1) * per_step]
        ms = lambda f: sum(f(l) for l in ls) / 1000.0
        print("  step %d ms: dispatch %.2f + %.2f, combine %.2f + %.2f, expert GEMMs %.2f, quant %.2f" % (
            s, ms(lambda l: l["dispatch"][0]["dur"]), ms(lambda l: l["dispatch"][1]["dur"]),
            ms(lambda l: l["combine"][0]["dur"]), ms(lambda l: l["combine"][1]["dur"]),
            ms(lambda l: sum(e["dur"] for e in l["expert_gemm"])),
            ms(lambda l: sum(e["dur"] for e in l["expert_quant"]))))


def main(paths, per_step=58):
    ranks = [moe_layers(p) for p in paths]
    for r, layers in enumerate(ranks):
        report(r, layers, per_step)
    if len(ranks) == 2 and len(ranks[0]) == len(ranks[1]):
        a, b = ranks
        n = range(len(a))
        print("rank 1 - rank 0 (us, one host clock):")
        print("  dispatch send start  %s" % summary([b[i]["dispatch"][0]["ts"] - a[i]["dispatch"][0]["ts"] for i in n]))
        print("  dispatch recv end    %s" % summary([end(b[i]["dispatch"][1]) - end(a[i]["dispatch"][1]) for i in n]))
        print("  combine send end     %s" % summary([end(b[i]["combine"][0]) - end(a[i]["combine"][0]) for i in n]))
        print("  combine recv end     %s" % summary([end(b[i]["combine"][1]) - end(a[i]["combine"][1]) for i in n]))
        print("  (recv end -> combine send end) %s" % summary(
            [(end(b[i]["combine"][0]) - end(b[i]["dispatch"][1])) - (end(a[i]["combine"][0]) - end(a[i]["dispatch"][1]))
             for i in n]))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
