#include "sim/app/step_analysis.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "hwmodels/calibration_fit.h"
#include "hwmodels/engine_profile.h"
#include "hwmodels/grouped_gemm_tiles.h"
#include "hwmodels/layer_kernels.h"

namespace moesim {

namespace {

std::string num(double x, const char* f = "%.1f") {
  std::array<char, 32> b{};
  std::snprintf(b.data(), b.size(), f, x);
  return b.data();
}

// One step with its composition by part; per-layer figures in seconds.
struct StepRow {
  const StepMeasurement* step = nullptr;
  ComposedStep parts;
  [[nodiscard]] double measured_layer() const {
    return (step->seconds - parts.head.seconds()) / double(parts.layers);
  }
  [[nodiscard]] double residual() const { return measured_layer() - parts.layer().seconds(); }
  [[nodiscard]] bool zipf() const { return step->label.find("zipf") != std::string::npos; }
};

std::vector<StepRow> step_rows(const GpuProfile& profile, const Measurements& m) {
  const ProfileCostModel model = calibrated_model(profile);
  const EngineProfile engine = engine_profile(EngineKind::kPytorchGraph);
  std::vector<StepRow> out;
  for (const StepMeasurement& s : m.steps)
    out.push_back({&s, compose_step_by_part(model, m.step_model, engine, s.step, m.step_l2_bytes)});
  return out;
}

// Mean of f over the decode rows that `keep` selects (0 if none).
double mean_of(const std::vector<StepRow>& rows, const std::function<bool(const StepRow&)>& keep,
               const std::function<double(const StepRow&)>& f) {
  double sum = 0;
  int n = 0;
  for (const StepRow& r : rows) {
    if (r.step->step.is_prefill || !keep(r)) continue;
    sum += f(r);
    ++n;
  }
  return n > 0 ? sum / n : 0.0;
}

std::string us(double s) { return num(s * 1e6); }

std::string table(const std::vector<StepRow>& rows) {
  std::string o =
      "| step | experts touched | GEMMs | attention | grouped experts | small kernels | measured layer | "
      "residual |\n|---|---|---|---|---|---|---|---|\n";
  for (const StepRow& r : rows) {
    o += "| " + r.step->label + " | " + num(r.step->step.experts_touched, "%.2f") + " | " +
         us(r.parts.gemms.seconds()) + " | " + us(r.parts.attention.seconds()) + " | " +
         us(r.parts.experts.seconds()) + " | " + us(r.parts.small.sum().seconds()) + " | " +
         us(r.measured_layer()) + " | " + us(r.residual()) + " |\n";
  }
  return o;
}

std::string by_dimension(const std::vector<StepRow>& rows) {
  auto resid = [](const StepRow& r) { return r.residual(); };
  std::string o = "Mean residual per layer by batch (over context and law):";
  for (const std::int64_t b : {1, 4, 16, 64}) {
    o += (b == 1 ? " B=" : ", B=") + std::to_string(b) + " " +
         us(mean_of(
             rows, [b](const StepRow& r) { return r.step->step.batch == b; }, resid)) +
         " us";
  }
  const double long_ctx = mean_of(
      rows, [](const StepRow& r) { return r.step->step.context > 512; }, resid);
  const double short_ctx = mean_of(
      rows, [](const StepRow& r) { return r.step->step.context <= 512; }, resid);
  const double zipf = mean_of(
      rows, [](const StepRow& r) { return r.zipf(); }, resid);
  const double uniform = mean_of(
      rows, [](const StepRow& r) { return !r.zipf(); }, resid);
  o += "; by context, L=2048 " + us(long_ctx) + " us against L=512 " + us(short_ctx) +
       " us; by routing law, Zipf 80/20 " + us(zipf) + " us against uniform " + us(uniform) +
       " us (Zipf touches fewer experts at B=4 and 16). Prefill chunks (residual per layer:";
  for (const StepRow& r : rows) {
    if (r.step->step.is_prefill) o += " T=" + std::to_string(r.step->step.tokens) + " " + us(r.residual());
  }
  return o + " us) are a different regime, compute-bound GEMMs and grouped experts, not this residual.";
}

// Every part of a decode step's residual put on its grouped launches (implied = composed + residual): the
// line through the steps with top_k and with every expert touched, and how far the steps between lie above
// it.
std::string expert_line(const std::vector<StepRow>& rows, const GqaMoeShape& s) {
  auto at = [&](double n, bool implied) {
    return mean_of(
        rows, [n](const StepRow& r) { return std::abs(r.step->step.experts_touched - n) <= 0.01; },
        [implied](const StepRow& r) { return r.parts.experts.seconds() + (implied ? r.residual() : 0.0); });
  };
  const double one = at(s.top_k, true), all = at(s.experts, true);
  const double one_fit = at(s.top_k, false), all_fit = at(s.experts, false);
  if (one <= 0 || all <= 0 || s.experts <= s.top_k) return "";
  const double span = double(s.experts - s.top_k);
  const double per = (all - one) / span, per_fit = (all_fit - one_fit) / span;
  const double zero = one - per * s.top_k, zero_fit = one_fit - per_fit * s.top_k;
  const double bytes = 3.0 * double(s.hidden) * double(s.expert_inter) * 2.0;
  double lo = 1, hi = -1;
  for (const StepRow& r : rows) {
    const double n = r.step->step.experts_touched;
    if (r.step->step.is_prefill || n < s.top_k + 0.5 || n > s.experts - 0.5) continue;
    const double above = r.parts.experts.seconds() + r.residual() - (zero + per * n);
    lo = lo > hi ? above : std::min(lo, above);
    hi = std::max(hi, above);
  }
  return " Put every part of each decode step's residual on its grouped launches: with " +
         std::to_string(s.top_k) + " experts touched they would take " + us(one) +
         " us per layer (composed " + us(one_fit) + "), with all " + std::to_string(s.experts) + " " +
         us(all) + " us (composed " + us(all_fit) + "): " + us(per) +
         " us per additional expert, its weights at " + num(bytes / per * 1e-12, "%.2f") +
         " TB/s (composed " + us(per_fit) + " us, " + num(bytes / per_fit * 1e-12, "%.2f") + " TB/s), and " +
         us(zero) + " us at zero experts (composed " + us(zero_fit) + "): " + us(zero - zero_fit) +
         " us per layer that does not grow with the experts touched. The steps between (B=4 and 16) lie " +
         us(lo) + "-" + us(hi) +
         " us above that line: the residual is not one per-layer constant plus the grouped fit's growth; it "
         "rises from batch 1 to 4 and 16 and falls again at 64.";
}

// The small-kernel launches pytorch_graph counts in one layer of the step model.
int layer_launches(const Measurements& m) {
  SmallKernelList list{};
  const std::size_t n = layer_small_kernels(gqa_moe_layer_shape(m.step_model, m.step_l2_bytes), 1,
                                            engine_profile(EngineKind::kPytorchGraph), list);
  int count = 0;
  for (std::size_t i = 0; i < n; ++i) count += list[i].launches;
  return count;
}

// (1) Launches the profile does not count: a cost flat in the batch below 64 tokens.
std::string launches(const std::vector<StepRow>& rows, const Measurements& m) {
  const int count = layer_launches(m);
  auto resid = [](const StepRow& r) { return r.residual(); };
  auto small = [](const StepRow& r) { return r.parts.small.sum().seconds(); };
  auto batch = [](std::int64_t b) { return [b](const StepRow& r) { return r.step->step.batch == b; }; };
  const double r1 = mean_of(rows, batch(1), resid);
  return "\n\n(1) Launches the profile does not count. pytorch_graph counts " + std::to_string(count) +
         " small-kernel launches a layer (hwmodels/layer_kernels.cpp); the measured implementation writes "
         "RMSNorm, Gumbel top-k and the counts and offsets out in PyTorch, which may launch more. Batch 1's "
         "residual, " +
         us(r1) + " us, would be " + num(r1 / m.graph_launch_s, "%.0f") + " more launches at " +
         num(m.graph_launch_s * 1e6, "%.2f") +
         " us. Launches do not grow with the batch here (the composed small kernels grow by " +
         us(mean_of(rows, batch(64), small) - mean_of(rows, batch(1), small)) +
         " us from B=1 to B=64), but the residual does (B=4 " + us(mean_of(rows, batch(4), resid)) +
         " us, B=16 " + us(mean_of(rows, batch(16), resid)) +
         " us): launches could carry batch 1's part at most, and a launch term applies to every "
         "pytorch_graph model alike, the held-out smaller model included, which batch 1 already "
         "over-predicts. Not added: hwmodels/cuda/layer_ops_sweep.py counts each op's kernels.";
}

const CalibrationPoint* find_point(const GpuProfile& profile, CostOp op, const std::string& label,
                                   std::int64_t shape_a = 0, std::int64_t shape_b = 0) {
  for (const CalibrationPoint& p : profile.points) {
    if (p.op == op && p.label == label && (shape_a == 0 || (p.shape_a == shape_a && p.shape_b == shape_b)))
      return &p;
  }
  return nullptr;
}

// (2) Attention at batch 1: attention_gqa.json is SDPA at the step model's head shape.
std::string attention(const GpuProfile& profile) {
  const CalibrationPoint* a = find_point(profile, CostOp::kAttentionDecode, "B=1 L=1024");
  const CalibrationPoint* b = find_point(profile, CostOp::kAttentionDecode, "B=1 L=4096");
  const CalibrationPoint* c = find_point(profile, CostOp::kAttentionDecode, "B=1 L=16384");
  if (a == nullptr || b == nullptr || c == nullptr) return "";
  auto pair = [&](const CalibrationPoint* p) {
    return us(p->seconds) + " us (fit " + us(predict_seconds(profile, *p)) + ")";
  };
  return "\n\n(2) Attention at batch 1. attention_gqa.json is PyTorch SDPA at this head shape; at B=1 it "
         "measures " +
         pair(a) + " at L=1,024, " + pair(b) + " at 4,096 and " + pair(c) +
         " at 16,384, not following its bytes (the first two flagged as anomalies above; at B=16 and 64 the "
         "fit holds). If "
         "the B=1 steps' attention costs the L=1,024 point, it carries " +
         us(a->seconds - predict_seconds(profile, *a)) +
         " us of batch 1's residual; it does not reach B=4 and 16's excess, and any model with SDPA at 8 or "
         "fewer KV heads at batch 1 (Qwen3-30B-A3B: 4) would get the same. Not added: a bytes-based term "
         "cannot carry a cost that falls from L=4,096 to 16,384; SDPA timed at the steps' B and L "
         "(layer_ops_sweep.py) is the data that would.";
}

// (3) The grouped kernel's deep K loop (down GEMM K = inter).
std::string k_loop(const GpuProfile& profile, const GqaMoeShape& s, std::int64_t sms) {
  const CalibrationPoint* ffn = find_point(profile, CostOp::kExpertFfn, "T=1", s.hidden, s.expert_inter);
  const OperationFit* grouped = profile.find_fit(CostOp::kGroupedExperts, Precision::kBF16);
  if (ffn == nullptr || ffn->parts_s.size() != 2 || grouped == nullptr) return "";
  const double h = double(s.hidden), i = double(s.expert_inter);
  const double down_rate = h * i * 2 / ffn->parts_s[1];
  std::vector<std::int64_t> rows(static_cast<std::size_t>(s.experts), 0);
  for (int k = 0; k < s.top_k && k < s.experts; ++k) rows[static_cast<std::size_t>(k)] = 1;
  const GroupedGemmTiling t = torch_grouped_mm_tiling(s.top_k, s.experts, s.hidden, false);
  const GroupedGemmOccupancy down = grouped_gemm_occupancy(rows, s.hidden, t, sms);
  const GroupedGemmOccupancy up = grouped_gemm_occupancy(rows, 2 * s.expert_inter, t, sms);
  return "\n\n(3) The grouped kernel's K loop. torch._grouped_mm's tiling at batch 1 (" +
         std::to_string(t.tile_m) + "x" + std::to_string(t.tile_n) + " tiles, a " +
         std::to_string(t.cluster_m) +
         "-CTA cluster along M; hwmodels/grouped_gemm_tiles.h) gives the down GEMM (K = " +
         std::to_string(s.expert_inter) + ") " + std::to_string(down.tiles) + " tiles on " +
         std::to_string(sms) + " SMs, " + std::to_string(down.waves) + " wave, and the up GEMM " +
         std::to_string(up.tiles) + " (" + std::to_string(up.waves) +
         " waves); the model already charges a partial wave as a full one, the most a per-SM streaming "
         "rate can cost (a CTA of a partial wave can only stream faster). The single-expert GEMMs at one row "
         "(expert_ffn_bf16.json, cuBLAS) stream the up GEMM (K = " +
         std::to_string(s.hidden) + ") at " + num(2 * h * i * 2 / ffn->parts_s[0] * 1e-12, "%.2f") +
         " TB/s and the down (K = " + std::to_string(s.expert_inter) + ") at " +
         num(down_rate * 1e-12, "%.2f") +
         " TB/s, fixed costs included. A deep K loop would at most make the down GEMM's weights stream at "
         "the down rate rather than the grouped fit's " +
         num(grouped->params.bytes_per_s * 1e-12, "%.2f") + " TB/s, " +
         us(h * i * 2 * (1 / down_rate - 1 / grouped->params.bytes_per_s)) +
         " us more per expert: it cannot add a cost per layer that does not grow with the experts. Experts "
         "of K = 768-1,024 (Qwen3-30B-A3B, OLMoE) would be unaffected. Not added.";
}

// (4) The grouped fit's compute term between B=16 and B=64 at (nearly) every expert touched.
std::string compute_term(const std::vector<StepRow>& rows) {
  const StepRow* b16 = nullptr;
  const StepRow* b64 = nullptr;
  for (const StepRow& r : rows) {
    if (r.step->label == "decode uniform B=16 L=512") b16 = &r;
    if (r.step->label == "decode uniform B=64 L=512") b64 = &r;
  }
  if (b16 == nullptr || b64 == nullptr) return "";
  auto rest = [](const StepRow& r) {
    return r.parts.gemms.seconds() + r.parts.attention.seconds() + r.parts.small.sum().seconds();
  };
  const double grew = b64->measured_layer() - b16->measured_layer();
  return "\n\n(4) The grouped fit's compute term. From B=16 to B=64 (uniform, L=512, " +
         num(b16->step->step.experts_touched, "%.2f") + " and " +
         num(b64->step->step.experts_touched, "%.2f") + " experts touched) the measured layer grows by " +
         us(grew) + " us and its composed non-expert parts by " + us(rest(*b64) - rest(*b16)) +
         " us: the grouped launches grew by " + us(grew - (rest(*b64) - rest(*b16))) +
         " us, where the composition adds " +
         us(b64->parts.experts.seconds() - b16->parts.experts.seconds()) +
         " us, mostly the fit's compute term on the real rows (the kernel computes its 64-row tiles in "
         "pairs at either batch, under the weight streaming). This is why B=64's residual is below B=16's; "
         "removing the term would move B=64 further from its measurement, so it is not the missing cost. For "
         "small experts the term is smaller per row by their H x I (2,048 x 768 is 37x less than "
         "4,096 x 14,336).";
}

}  // namespace

ProfileCostModel calibrated_model(const GpuProfile& profile) {
  GpuSpec fallback;
  fallback.name = profile.gpu;
  return ProfileCostModel(profile, fallback, profile.gpu);
}

std::string step_residual_analysis(const GpuProfile& profile, const Measurements& m) {
  if (m.steps.empty() || m.graph_launch_s <= 0 || m.step_sms <= 0) return "";
  if (profile.find_fit(CostOp::kGroupedExperts, Precision::kBF16) == nullptr) return "";
  const std::vector<StepRow> rows = step_rows(profile, m);
  // The constant fitted on these steps before the launch was measured (VALIDATION.md's history).
  constexpr double kOldConstantS = 3.91e-6;
  const int count = layer_launches(m);
  return "\nWhat the fitted constant stood for. Until this table was regenerated, each small kernel cost " +
         num(kOldConstantS * 1e6, "%.2f") + " us, fitted on these decode steps; it is now " +
         num(m.graph_launch_s * 1e6, "%.2f") +
         " us, a tiny kernel replayed in a CUDA graph on this GPU (platform.json, "
         "launch.graph_tiny_kernel_us), and nothing is fitted on this file. Over the launch, the old "
         "constant "
         "added " +
         std::to_string(count) + " launches x " + num((kOldConstantS - m.graph_launch_s) * 1e6, "%.2f") +
         " us = " + us(count * (kOldConstantS - m.graph_launch_s)) +
         " us to every layer: it stood for the residual below, whatever its mechanism.\n\nWhere the residual "
         "lies. Each step by part, per layer, in us: the composed parts "
         "(pytorch_graph), "
         "the measured step less the composed final RMSNorm and LM head over the layers, and the residual "
         "(measured less composed; `moesim calibrate` computes it, sim/app/step_analysis.cpp):\n\n" +
         table(rows) + "\n" + by_dimension(rows) + expert_line(rows, m.step_model) +
         "\n\nEach named mechanism against that pattern, and what it would do to a model with small "
         "experts:" +
         launches(rows, m) + attention(profile) + k_loop(profile, m.step_model, m.step_sms) +
         compute_term(rows) +
         "\n\nSo the residual follows the batch through the experts touched, not the context, and none of "
         "the four carries its shape. Which kernel does is "
         "measured by hwmodels/cuda/layer_ops_sweep.py (run_on_device.sh): each op of this layer alone in "
         "CUDA graphs at B = 1, 4, 16, 64 with its kernel count, the whole layer, and the grouped experts at "
         "1 to 8 touched on this expert shape (CALIBRATION.md says how calibrate would use it).\n";
}

namespace {

// The small ops of one layer as the script's LAYER runs them (two norms, two residual adds): what the
// pytorch_graph profile counts as small kernels (hwmodels/layer_kernels.cpp).
constexpr std::array<std::string_view, 12> kSmallOps{
    "rms_norm_fused", "rms_norm_fused", "residual_add",       "residual_add",
    "kv_cache_write", "gumbel_topk",    "routing_softmax",    "sort_by_expert",
    "counts_offsets", "gather_rows",    "routing_weight_mul", "index_add"};

const LayerOpPoint* op_at(const LayerOps& l, std::int64_t b, std::int64_t ctx, std::string_view op) {
  for (const LayerOpPoint& p : l.ops) {
    if (p.batch == b && p.context == ctx && p.op == op) return &p;
  }
  return nullptr;
}

std::string small_ops_rows(const GpuCostModel& gpu, const Measurements& m) {
  const LayerOps& l = m.layer_ops;
  const EngineProfile e = engine_profile(EngineKind::kPytorchGraph);
  const LayerKernelShape shape = gqa_moe_layer_shape(l.model, m.step_l2_bytes);
  std::string o;
  for (const LayerOpPoint& sdpa : l.ops) {
    if (sdpa.op != "sdpa") continue;
    int kernels = 0;
    double seconds = 0;
    for (const std::string_view name : kSmallOps) {
      const LayerOpPoint* p = op_at(l, sdpa.batch, sdpa.context, name);
      if (p == nullptr) return "";  // an incomplete file: no row rather than a wrong sum
      kernels += p->kernels;
      seconds += p->seconds;
    }
    const AttentionWork w = decode_attention_work(double(sdpa.batch), double(sdpa.context + 1),
                                                  l.model.q_heads, l.model.kv_heads, l.model.head_dim);
    o += "| " + std::to_string(sdpa.batch) + " | " + std::to_string(sdpa.context) + " | " +
         std::to_string(kernels) + " | " + us(seconds) + " | " +
         us(layer_small_kernels_time(gpu, shape, sdpa.batch, e).seconds()) + " | " + us(sdpa.seconds) +
         " | " + us(gpu.attention(w).seconds()) + " |\n";
  }
  return o;
}

std::string grouped_rows(const GpuCostModel& gpu, const Measurements& m) {
  const EngineProfile e = engine_profile(EngineKind::kPytorchGraph);
  std::string o;
  for (const GroupedByTouched& g : m.layer_ops.grouped) {
    const double composed =
        step_layer_experts(gpu, m.layer_ops.model, e,
                           {.batch = g.batch, .tokens = g.batch, .experts_touched = double(g.touched)})
            .seconds();
    o += "| " + std::to_string(g.batch) + " | " + std::to_string(g.touched) + " | " + us(g.seconds) + " | " +
         us(composed) + " | " + num(100 * (composed / g.seconds - 1), "%+.1f") + "% |\n";
  }
  return o;
}

}  // namespace

std::string layer_ops_report(const GpuProfile& profile, const Measurements& m) {
  if (m.layer_ops.ops.empty()) return "";
  const ProfileCostModel model = calibrated_model(profile);
  SmallKernelList list{};
  const std::size_t n = layer_small_kernels(gqa_moe_layer_shape(m.layer_ops.model, m.step_l2_bytes), 1,
                                            engine_profile(EngineKind::kPytorchGraph), list);
  int counted = 0;
  for (std::size_t i = 0; i < n; ++i) counted += list[i].launches;
  return "\n## One layer op by op (layer_ops file, hwmodels/cuda/layer_ops_sweep.py)\n\n"
         "The small ops of one layer (two fused RMSNorms, two residual adds, KV write, Gumbel top-k, "
         "softmax, "
         "argsort, counts and offsets, gather, weight multiply, index_add) against the " +
         std::to_string(counted) +
         " launches pytorch_graph counts, and SDPA against the "
         "attention fit, in us:\n\n"
         "| B | L | small-op kernels | small ops | composed small kernels | SDPA | composed attention |\n"
         "|---|---|---|---|---|---|---|\n" +
         small_ops_rows(model, m) +
         "\nThe grouped experts (up, SiLU*mul, down) at each touched count against the composed grouped "
         "launches:\n\n| B | touched | measured us | composed us | error |\n|---|---|---|---|---|\n" +
         grouped_rows(model, m);
}

}  // namespace moesim
