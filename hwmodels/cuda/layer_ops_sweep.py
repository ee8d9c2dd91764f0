#!/usr/bin/env python3
"""Each op of one Mixtral-8x7B decode layer timed on its own, as shared/calibration/h200/README.md describes
the measured implementation ("Whole-model steps: what one layer of the measured implementation runs"), for
B = 1, 4, 16, 64 sequences at context L = 512 and 2048, BF16, uniform Gumbel top-k routing.

What it answers (VALIDATION.md, "What the fitted constant stood for"): where the ~43-100 us per layer that
the composed Mixtral decode steps lack goes. Per op it writes
  us       its time inside a CUDA graph (median of 10 replays of a graph that runs it on each of `copies`
           layer copies, per copy; the copies' weights and KV caches together exceed 4x the L2, as in a
           step where 32 layers stream through it);
  kernels  the CUDA kernels (and memsets/copies) one eager call launches (torch.profiler), i.e. what a
           graph of it holds: compare with the launches the pytorch_graph profile counts
           (hwmodels/layer_kernels.cpp);
and per (B, L) the whole layer as one graph ("layer"), so the sum of the ops can be checked against it.
"grouped_by_touched" times the expert part alone (grouped up, SiLU*mul, grouped down, as
moe_layer_deepseek_v3_ep8.json times it) for n = 1..8 touched experts at each B (B*top_k rows spread evenly
over the n experts): the per-layer expert cost as a function of n on this expert shape (K = 14,336 in the
down GEMM), which the steps only give at their mean n.

Both RMSNorm forms are timed: torch.nn.functional.rms_norm and the one written out in PyTorch (float cast,
pow, mean, rsqrt, multiply, cast back, weight): the step's README does not say which it ran.

  python3 hwmodels/cuda/layer_ops_sweep.py --out DIR         # writes DIR/layer_ops_mixtral_8x7b.json
  python3 hwmodels/cuda/layer_ops_sweep.py --list            # the op plan, no torch needed
Then `moesim calibrate --fit ../shared/calibration/h200/*.json DIR/layer_ops_mixtral_8x7b.json --dry-run`
prints it against the composition ("One layer op by op").
Needs PyTorch with CUDA (torch._grouped_mm: PyTorch >= 2.8 on SM90); nothing else.
"""
import argparse
import json
import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from grouped_experts_sweep import Gpu  # noqa: E402  (CUDA-graph timing shared with the grouped sweep)

MIXTRAL = {"hidden": 4096, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "experts": 8, "top_k": 2,
           "expert_inter": 14336, "eps": 1e-5}
BATCHES = [1, 4, 16, 64]
CONTEXTS = [512, 2048]
# In layer order; each reads the previous ones' outputs (computed once, eagerly, before timing).
OPS = ["rms_norm_fused", "rms_norm_manual", "qkv_gemm", "kv_cache_write", "sdpa", "o_gemm", "residual_add",
       "router_gemm", "gumbel_topk", "routing_softmax", "sort_by_expert", "counts_offsets", "gather_rows",
       "grouped_up", "silu_mul", "grouped_down", "routing_weight_mul", "index_add", "experts_grouped"]
# The layer as the step runs it: two norms and two residual adds; the fused RMSNorm (the manual one and the
# expert region as one are timed apart).
LAYER = ["rms_norm_fused", "qkv_gemm", "kv_cache_write", "sdpa", "o_gemm", "residual_add", "rms_norm_fused",
         "router_gemm", "gumbel_topk", "routing_softmax", "sort_by_expert", "counts_offsets", "gather_rows",
         "grouped_up", "silu_mul", "grouped_down", "routing_weight_mul", "index_add", "residual_add"]


def rms_norm_manual(torch, x, w, eps):
    """RMSNorm written out in PyTorch (the Hugging Face MixtralRMSNorm form)."""
    h = x.to(torch.float32)
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return w * h.to(x.dtype)


class Layer:
    """One decode layer's weights, KV cache and intermediate tensors for B sequences at context L."""

    def __init__(self, torch, b, ctx, cfg):
        self.torch, self.cfg, self.b = torch, cfg, b
        h, hq, hkv, d = cfg["hidden"], cfg["q_heads"], cfg["kv_heads"], cfg["head_dim"]
        e, inter = cfg["experts"], cfg["expert_inter"]
        bf, dev = torch.bfloat16, "cuda"
        r = lambda *s: torch.randn(*s, device=dev, dtype=bf) * 0.02  # noqa: E731
        self.norm_w = torch.ones(h, device=dev, dtype=bf)
        self.wqkv, self.wo = r(h, (hq + 2 * hkv) * d), r(hq * d, h)
        self.wr = torch.zeros(h, e, device=dev, dtype=bf)  # zero logits: the Gumbel noise alone, uniform
        # [E, N, K] seen as [E, K, N]: column-major B, as the grouped sweep and the engines lay it out.
        self.w13 = r(e, 2 * inter, h).transpose(-2, -1)
        self.w2 = r(e, h, inter).transpose(-2, -1)
        self.k_cache, self.v_cache = r(b, hkv, ctx + 1, d), r(b, hkv, ctx + 1, d)
        self.pos = ctx
        self.x = r(b, h)
        self.prepare()

    def prepare(self):
        """Every intermediate once, eagerly, so each op can be timed alone on real inputs."""
        t, F, c = self.torch, self.torch.nn.functional, self.cfg
        self.hn = F.rms_norm(self.x, (c["hidden"],), self.norm_w, c["eps"])
        self.qkv = self.hn @ self.wqkv
        hq, hkv, d = c["q_heads"], c["kv_heads"], c["head_dim"]
        self.q = self.qkv[:, :hq * d].view(self.b, hq, 1, d)
        self.k = self.qkv[:, hq * d:(hq + hkv) * d].view(self.b, hkv, d)
        self.v = self.qkv[:, (hq + hkv) * d:].view(self.b, hkv, d)
        self.attn = self.op_sdpa()
        self.h2 = self.x + self.attn @ self.wo
        self.logits = self.h2 @ self.wr
        self.top_idx, self.top_logits = self.op_gumbel_topk()
        self.weights = t.softmax(self.top_logits.float(), -1).to(self.x.dtype)
        self.flat, self.order, self.token_of_row = self.op_sort_by_expert()
        self.offs = self.op_counts_offsets()
        self.rows = self.h2[self.token_of_row]
        self.up = t._grouped_mm(self.rows, self.w13, offs=self.offs)
        self.act = self.op_silu_mul()
        self.down = t._grouped_mm(self.act, self.w2, offs=self.offs)

    def op_sdpa(self):
        F = self.torch.nn.functional
        return F.scaled_dot_product_attention(self.q, self.k_cache, self.v_cache,
                                              enable_gqa=True).reshape(self.b, -1)

    def op_gumbel_topk(self):
        t = self.torch
        u = t.rand_like(self.logits, dtype=t.float32)
        noisy = self.logits.float() - t.log(-t.log(u))
        idx = t.topk(noisy, self.cfg["top_k"], dim=-1).indices
        return idx, self.logits.gather(-1, idx)

    def op_sort_by_expert(self):
        t = self.torch
        flat = self.top_idx.reshape(-1)
        order = t.argsort(flat, stable=True)
        return flat, order, order // self.cfg["top_k"]

    def op_counts_offsets(self):
        t = self.torch
        counts = t.zeros(self.cfg["experts"], device="cuda", dtype=t.int32)
        counts.scatter_add_(0, self.flat, t.ones_like(self.flat, dtype=t.int32))
        return t.cumsum(counts, 0, dtype=t.int32)

    def op_silu_mul(self):
        a, b = self.up.split(self.cfg["expert_inter"], dim=-1)
        return self.torch.nn.functional.silu(a) * b

    def op(self, name):
        """The callable that runs op `name` once on this layer's tensors."""
        t, F, c = self.torch, self.torch.nn.functional, self.cfg
        table = {
            "rms_norm_fused": lambda: F.rms_norm(self.x, (c["hidden"],), self.norm_w, c["eps"]),
            "rms_norm_manual": lambda: rms_norm_manual(t, self.x, self.norm_w, c["eps"]),
            "qkv_gemm": lambda: self.hn @ self.wqkv,
            "kv_cache_write": lambda: (self.k_cache[:, :, self.pos].copy_(self.k),
                                       self.v_cache[:, :, self.pos].copy_(self.v)),
            "sdpa": self.op_sdpa,
            "o_gemm": lambda: self.attn @ self.wo,
            "residual_add": lambda: self.x + self.h2,
            "router_gemm": lambda: self.h2 @ self.wr,
            "gumbel_topk": self.op_gumbel_topk,
            "routing_softmax": lambda: t.softmax(self.top_logits.float(), -1).to(self.x.dtype),
            "sort_by_expert": self.op_sort_by_expert,
            "counts_offsets": self.op_counts_offsets,
            "gather_rows": lambda: self.h2[self.token_of_row],
            "grouped_up": lambda: t._grouped_mm(self.rows, self.w13, offs=self.offs),
            "silu_mul": self.op_silu_mul,
            "grouped_down": lambda: t._grouped_mm(self.act, self.w2, offs=self.offs),
            "routing_weight_mul": lambda: self.down * self.weights.reshape(-1)[self.order, None],
            "index_add": lambda: t.zeros_like(self.x).index_add_(0, self.token_of_row, self.down),
            "experts_grouped": self.experts_once,
        }
        return table[name]

    def experts_once(self):
        """Grouped up, SiLU*mul, grouped down: the region moe_layer_deepseek_v3_ep8.json times."""
        t, F, inter = self.torch, self.torch.nn.functional, self.cfg["expert_inter"]
        up = t._grouped_mm(self.rows, self.w13, offs=self.offs)
        a, b = up.split(inter, dim=-1)
        return t._grouped_mm(F.silu(a) * b, self.w2, offs=self.offs)

    def whole(self):
        """The whole layer in order (LAYER), as one graph."""
        for name in LAYER:
            self.op(name)()

    def set_touched(self, n):
        """Rows of the B*top_k pairs spread evenly over experts 0..n-1 (the grouped-by-touched sweep)."""
        t = self.torch
        pairs = self.b * self.cfg["top_k"]
        counts = [pairs // n + (1 if i < pairs % n else 0) for i in range(n)] + [0] * (self.cfg["experts"] - n)
        self.offs = t.tensor(counts, device="cuda", dtype=t.int32).cumsum(0).to(t.int32)


def kernel_count(torch, fn):
    """CUDA kernels, memsets and copies one eager call of fn launches."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def copies_for(layer_bytes, l2_bytes):
    """Layer copies so that the copies together exceed 4x the L2 (at least 2)."""
    return max(2, math.ceil(4 * l2_bytes / layer_bytes))


def sweep(gpu, cfg):
    torch = gpu.torch
    l2 = gpu.meta["l2_bytes"] or 64 << 20
    ops, layers, grouped = [], [], []
    for ctx in CONTEXTS:
        for b in BATCHES:
            probe = Layer(torch, b, ctx, cfg)
            size = sum(v.numel() * v.element_size() for v in vars(probe).values() if torch.is_tensor(v))
            n_copies = copies_for(size, l2)
            copies = [probe] + [Layer(torch, b, ctx, cfg) for _ in range(n_copies - 1)]
            for name in OPS:
                us = 1e3 * gpu.time_ms(lambda c: copies[c].op(name)(), n_copies)
                ops.append({"B": b, "L": ctx, "op": name, "us": us,
                            "kernels": kernel_count(torch, probe.op(name))})
                print(f"B={b} L={ctx} {name}: {us:.2f} us, {ops[-1]['kernels']} kernels", flush=True)
            layers.append({"B": b, "L": ctx, "us": 1e3 * gpu.time_ms(lambda c: copies[c].whole(), n_copies),
                           "copies": n_copies,
                           # experts the layer's routing draw touches (its grouped launches' n)
                           "touched": [int(torch.unique(layer.flat).numel()) for layer in copies]})
            print(f"B={b} L={ctx} layer: {layers[-1]['us']:.2f} us", flush=True)
            if ctx == CONTEXTS[0]:
                for n in range(1, cfg["experts"] + 1):
                    if n > b * cfg["top_k"]:
                        break
                    for layer in copies:
                        layer.set_touched(n)
                    us = 1e3 * gpu.time_ms(lambda c: copies[c].experts_once(), n_copies)
                    grouped.append({"B": b, "touched": n, "us": us})
                    print(f"B={b} touched={n}: experts {us:.2f} us", flush=True)
            del copies, probe
            torch.cuda.empty_cache()
    return ops, layers, grouped


def synthetic(cfg):
    """Placeholder records of the real ones' form (10 us and one kernel per op, 100 us per touched expert)."""
    ops = [{"B": b, "L": ctx, "op": name, "us": 10.0, "kernels": 1}
           for ctx in CONTEXTS for b in BATCHES for name in OPS]
    layers = [{"B": b, "L": ctx, "us": 10.0 * len(LAYER), "copies": 2, "touched": [1, 1]}
              for ctx in CONTEXTS for b in BATCHES]
    grouped = [{"B": b, "touched": n, "us": 100.0 * n}
               for b in BATCHES for n in range(1, min(cfg["experts"], b * cfg["top_k"]) + 1)]
    return ops, layers, grouped


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="folder for layer_ops_mixtral_8x7b.json")
    ap.add_argument("--list", action="store_true", help="print the op plan and exit (no torch needed)")
    ap.add_argument("--synthetic", action="store_true",
                    help="placeholder timings, no GPU: only to check that the file round-trips through "
                         "moesim calibrate (tests/CMakeLists.txt), never to read")
    args = ap.parse_args()
    if args.list:
        print(json.dumps({"config": MIXTRAL, "B": BATCHES, "L": CONTEXTS, "ops": OPS, "layer": LAYER}, indent=1))
        return
    if not args.out:
        sys.exit("--out DIR is required (or --list)")
    gpu = None if args.synthetic else Gpu()
    ops, layers, grouped = synthetic(MIXTRAL) if gpu is None else sweep(gpu, MIXTRAL)
    doc = {"what": "Each op of one Mixtral-8x7B decode layer (the measured step's implementation, "
                   "shared/calibration/h200/README.md) timed alone in CUDA graphs, its kernel count, the "
                   "whole layer, and the grouped experts by touched count; hwmodels/cuda/layer_ops_sweep.py" +
                   (" (SYNTHETIC timings)" if gpu is None else ""),
           "meta": gpu.meta if gpu else {"name": "synthetic"}, "config": MIXTRAL, "ops": ops,
           "layer": layers, "grouped_by_touched": grouped}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "layer_ops_mixtral_8x7b.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
