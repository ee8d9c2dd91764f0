#!/usr/bin/env python3
"""One MoE layer's experts on one GPU, for every expert shape of scenarios/catalog/models.json.

For each model: the experts one GPU holds under EP8 (all of them when the model has fewer than 64), per-expert
token counts drawn from the routing law (each token picks top_k distinct experts of the whole model; the GPU
keeps the picks that land on its experts), and the layer's expert computation timed two ways, as
shared/calibration/h200/README.md describes for moe_layer_deepseek_v3_ep8.json:
  grouped_ms  torch._grouped_mm up (W13), SiLU*mul, torch._grouped_mm down (W2): what serving engines run;
  loop_ms     one SwiGLU FFN per expert with tokens.
Each timed region is a CUDA graph replay, median of 10 after warm-up; the weights are rotated over enough
copies that the set is at least 4x the L2, so the weights come from HBM. BF16. Writes
moe_layer_<model>_ep<N>.json files that `moesim calibrate --fit` reads beside the shared ones.

--synthetic writes the same files with timings from a simple roofline instead of a GPU (no torch needed):
only to check that the files round-trip through `moesim calibrate` (tests/CMakeLists.txt), never to fit.
"""
import argparse
import datetime
import json
import math
import pathlib
import random
import statistics
import sys

TOKENS = [8, 64, 256, 1024, 4096]
LAWS = ["uniform", "zipf80_20"]


def zipf_weights(n):
    """Zipf weights 1/rank^s over n experts with s such that the top 20% hold 80% of the mass (bisection)."""
    top = max(1, round(0.2 * n))

    def share(s):
        w = [1.0 / (r + 1) ** s for r in range(n)]
        return sum(w[:top]) / sum(w)

    lo, hi = 0.0, 20.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if share(mid) < 0.8 else (lo, mid)
    s = 0.5 * (lo + hi)
    return [1.0 / (r + 1) ** s for r in range(n)]


def draw_counts(rng, experts, top_k, tokens, law, local):
    """Per-expert counts on the GPU holding experts [0, local) (the hottest under the Zipf law)."""
    weights = [1.0] * experts if law == "uniform" else zipf_weights(experts)
    counts = [0] * local
    for _ in range(tokens):
        # Gumbel top-k: k distinct experts, each drawn with probability proportional to its weight.
        keys = sorted(range(experts), key=lambda e: math.log(weights[e]) - math.log(-math.log(rng.random())),
                      reverse=True)
        for e in keys[:top_k]:
            if e < local:
                counts[e] += 1
    return counts


def local_experts(total):
    return total // 8 if total >= 64 and total % 8 == 0 else total


def synthetic_ms(counts, hidden, inter, per_expert):
    """Roofline stand-in (3 TB/s, 600 TFLOP/s, 10 us per launch): format checks only."""
    touched = [c for c in counts if c > 0]
    weights = 3.0 * hidden * inter * 2 * len(touched)
    flops = 6.0 * hidden * inter * sum(touched)
    launches = 3 * len(touched) if per_expert else 3
    return 1e3 * (max(weights / 3e12, flops / 600e12) + launches * 10e-6)


class Gpu:
    def __init__(self):
        import torch
        import torch.nn.functional as F
        self.torch, self.F = torch, F
        p = torch.cuda.get_device_properties(0)
        self.meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "name": p.name,
                     "sm_count": p.multi_processor_count, "total_mem_gib": p.total_memory / 2**30,
                     "l2_bytes": getattr(p, "L2_cache_size", 0),
                     "date": datetime.date.today().isoformat()}

    def time_ms(self, fn, copies):
        """Median of 10 replays of a graph that runs fn on each weight copy once, per copy."""
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for c in range(copies):
                fn(c)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for c in range(copies):
                fn(c)
        for _ in range(3):
            g.replay()
        times = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / copies)
        return statistics.median(times)

    def layer_ms(self, counts, hidden, inter):
        torch, F = self.torch, self.F
        e = len(counts)
        weight_bytes = 3 * hidden * inter * 2 * e
        l2 = self.meta["l2_bytes"] or 64 << 20
        copies = max(1, math.ceil(4 * l2 / weight_bytes))
        dev = "cuda"
        # [E, N, K] transposed to [E, K, N] views: column-major B, as the grouped kernels read it.
        w13 = [torch.randn(e, 2 * inter, hidden, device=dev, dtype=torch.bfloat16).transpose(-2, -1)
               for _ in range(copies)]
        w2 = [torch.randn(e, hidden, inter, device=dev, dtype=torch.bfloat16).transpose(-2, -1)
              for _ in range(copies)]
        pairs = sum(counts)
        x = torch.randn(pairs, hidden, device=dev, dtype=torch.bfloat16)
        offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0).to(torch.int32)

        def grouped(c):
            h = torch._grouped_mm(x, w13[c], offs=offs)
            a, b = h.split(inter, dim=-1)
            return torch._grouped_mm((F.silu(a) * b).contiguous(), w2[c], offs=offs)

        starts = [0]
        for n in counts:
            starts.append(starts[-1] + n)

        def loop(c):
            for i, n in enumerate(counts):
                if n == 0:
                    continue
                h = x[starts[i]:starts[i + 1]] @ w13[c][i]
                a, b = h.split(inter, dim=-1)
                (F.silu(a) * b) @ w2[c][i]

        out = (self.time_ms(grouped, copies), self.time_ms(loop, copies))
        del w13, w2, x
        torch.cuda.empty_cache()
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for the moe_layer_<model>_ep<N>.json files")
    ap.add_argument("--catalog", default=str(pathlib.Path(__file__).resolve().parents[2] /
                                             "scenarios/catalog/models.json"))
    ap.add_argument("--models", default="", help="comma-separated catalog names (default: every MoE model)")
    ap.add_argument("--synthetic", action="store_true", help="roofline timings, no GPU (format checks only)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    catalog = json.loads(pathlib.Path(args.catalog).read_text())
    names = [n for n in args.models.split(",") if n] or sorted(catalog)
    gpu = None if args.synthetic else Gpu()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seen = set()
    for name in names:
        if name not in catalog:
            sys.exit(f"{args.catalog}: no model \"{name}\"")
        m = catalog[name]
        if m.get("routed_experts", 0) <= 1:
            continue
        hidden, inter, experts, k = m["hidden"], m["expert_inter"], m["routed_experts"], m["top_k"]
        local = local_experts(experts)
        if (hidden, inter, local) in seen:  # another model with the same layer on one GPU
            continue
        seen.add((hidden, inter, local))
        rng = random.Random(args.seed)
        cases = []
        for law in LAWS:
            for t in TOKENS:
                counts = draw_counts(rng, experts, k, t, law, local)
                if sum(counts) == 0:
                    continue
                if gpu is None:
                    grouped, loop = (synthetic_ms(counts, hidden, inter, False),
                                     synthetic_ms(counts, hidden, inter, True))
                else:
                    grouped, loop = gpu.layer_ms(counts, hidden, inter)
                cases.append({"law": law, "tokens": t, "top_k": k, "assignments": sum(counts),
                              "counts": counts, "hidden": hidden, "inter": inter, "local_experts": local,
                              "loop_ms": loop, "grouped_ms": grouped})
                print(f"{name} E={local} T={t} {law}: grouped {grouped:.4f} ms, loop {loop:.4f} ms", flush=True)
        ep = experts // local
        doc = {"what": f"One MoE layer's expert computation on one GPU of an EP{ep} {name} deployment "
                       f"({local} local experts of H={hidden}, I={inter}, BF16), grouped and looped; "
                       "hwmodels/cuda/grouped_experts_sweep.py" + (" (SYNTHETIC timings)" if gpu is None else ""),
               "meta": gpu.meta if gpu else {"name": "synthetic", "sm_count": 132,
                                             "date": datetime.date.today().isoformat()},
               "cases": cases}
        path = out / f"moe_layer_{name.replace('-', '_')}_ep{ep}.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
