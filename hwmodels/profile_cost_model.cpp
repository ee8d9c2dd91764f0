#include "hwmodels/profile_cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "hwmodels/grouped_gemm_tiles.h"
#include "hwmodels/roofline_cost_model.h"

namespace moesim {

namespace {
constexpr std::array<std::pair<CostOp, std::string_view>, 9> kOpNames{{
    {CostOp::kGemm, "gemm"},
    {CostOp::kExpertFfn, "expert_ffn"},
    {CostOp::kAttentionDecode, "attention_decode"},
    {CostOp::kAttentionPrefill, "attention_prefill"},
    {CostOp::kPermute, "permute"},
    {CostOp::kUnpermute, "unpermute"},
    {CostOp::kGroupedExperts, "grouped_experts"},
    {CostOp::kExpertLoop, "expert_loop"},
    {CostOp::kSmallKernel, "small_kernel"},
}};
}  // namespace

std::string_view to_string(CostOp op) {
  for (const auto& [value, name] : kOpNames) {
    if (value == op) return name;
  }
  return "?";
}

std::optional<CostOp> parse_cost_op(std::string_view s) {
  for (const auto& [value, name] : kOpNames) {
    if (name == s) return value;
  }
  return std::nullopt;
}

std::optional<double> GpuProfile::seconds(CostOp op, Precision p, std::int64_t shape_a, std::int64_t shape_b,
                                          double bytes, double flops) const {
  if (const OperationFit* exact = find_fit(op, p, shape_a, shape_b))
    return exact->params.seconds(bytes, flops);
  const OperationFit* base = find_fit(op, Precision::kBF16, shape_a, shape_b);
  if (base == nullptr) return std::nullopt;
  RooflineFit scaled = base->params;
  scaled.flops_per_s *= rate_scale_of(p);
  return scaled.seconds(bytes, flops);
}

double RooflineFit::seconds(double bytes, double flops) const {
  const double mem = bytes / bytes_per_s;
  const double compute = flops / flops_per_s;
  const double hi = std::max(mem, compute);
  if (hi <= 0) return fixed_s;
  // (a^p + b^p)^(1/p) = hi * (1 + (lo/hi)^p)^(1/p): no overflow for large p.
  const double lo = std::min(mem, compute);
  if (lo <= 0 && sharpness > 0) return fixed_s + hi;  // the formula's value, without two pow calls
  return fixed_s + hi * std::pow(1.0 + std::pow(lo / hi, sharpness), 1.0 / sharpness);
}

const OperationFit* GpuProfile::find_fit(CostOp op, Precision p, std::int64_t shape_a,
                                         std::int64_t shape_b) const {
  const OperationFit* any_shape = nullptr;
  for (const auto& f : fits) {
    if (f.op != op || f.precision != p) continue;
    if (f.shape_a == 0 && f.shape_b == 0) any_shape = &f;
    if (f.shape_a == shape_a && f.shape_b == shape_b) return &f;
  }
  return any_shape;
}

double GpuProfile::loop_fixed_delta_s(Precision p, std::int64_t hidden, std::int64_t inter) const {
  const OperationFit* loop = find_fit(CostOp::kExpertLoop, p, hidden, inter);
  if (loop == nullptr) loop = find_fit(CostOp::kExpertLoop, Precision::kBF16, hidden, inter);
  const OperationFit* ffn = find_fit(CostOp::kExpertFfn, p, hidden, inter);
  if (ffn == nullptr) ffn = find_fit(CostOp::kExpertFfn, Precision::kBF16, hidden, inter);
  if (loop == nullptr || ffn == nullptr) return 0;
  return std::min(0.0, loop->params.fixed_s - ffn->params.fixed_s);
}

double GpuProfile::rate_scale_of(Precision p) const {
  for (const auto& [prec, scale] : rate_scale) {
    if (prec == p) return scale;
  }
  return 1.0;
}

BytesFlops work_bytes_flops(const GemmWork& w) {
  const double m = static_cast<double>(w.m);
  const double n = static_cast<double>(w.n);
  const double k = static_cast<double>(w.k);
  return {.bytes = k * n * bytes_per_element(w.weights) + 2.0 * (m * k + m * n), .flops = gemm_flops(w)};
}

BytesFlops work_bytes_flops(const ExpertFfnWork& w) {
  const double t = static_cast<double>(w.tokens);
  const double h = static_cast<double>(w.hidden);
  const double i = static_cast<double>(w.inter);
  return {.bytes = expert_ffn_weight_bytes(w) + 2.0 * (2.0 * t * h + 3.0 * t * i),
          .flops = expert_ffn_flops(w)};
}

BytesFlops work_bytes_flops(const GroupedExpertsWork& w) {
  const double t = static_cast<double>(w.tokens);
  const double h = static_cast<double>(w.hidden);
  const double i = static_cast<double>(w.inter);
  return {.bytes = static_cast<double>(w.experts) * 3.0 * h * i * bytes_per_element(w.weights) +
                   2.0 * (2.0 * t * h + 3.0 * t * i),
          .flops = grouped_experts_flops(w)};
}

double grouped_occupancy_stretch(const GroupedExpertsWork& w, const GpuSpec& gpu) {
  if (w.weights != Precision::kBF16 || w.family != ExpertKernelFamily::kCutlassGrouped) return 1.0;
  if (gpu.arch != "" && gpu.arch != "hopper" && gpu.arch != "blackwell") return 1.0;
  return grouped_experts_stretch_even(w.experts, w.tokens, w.groups, w.hidden, w.inter,
                                      {.sms = gpu.sms, .sm100 = gpu.arch == "blackwell"});
}

BytesFlops grouped_stream_bytes_flops(const GroupedExpertsWork& w, double stretch) {
  BytesFlops bf = work_bytes_flops(w);
  const double weights = static_cast<double>(w.experts) * 3.0 * static_cast<double>(w.hidden) *
                         static_cast<double>(w.inter) * bytes_per_element(w.weights);
  bf.bytes += (stretch - 1.0) * weights;
  return bf;
}

AttentionWork decode_attention_work(double batch, double context, double q_heads, double kv_heads,
                                    double head_dim) {
  // K and V of every cached token, Q in and O out, BF16; QK^T and PV: 2 * 2 * L * Hq * D per sequence.
  const double kv = batch * context * 2.0 * kv_heads * head_dim * 2.0;
  const double qo = batch * 2.0 * q_heads * head_dim * 2.0;
  return {.bytes = kv + qo, .flops = 4.0 * batch * context * q_heads * head_dim, .is_prefill = false};
}

AttentionWork prefill_attention_work(double context, double q_heads, double kv_heads, double head_dim) {
  const double bytes = context * (2.0 * kv_heads + 2.0 * q_heads) * head_dim * 2.0;
  // Causal: half of the full 4 * L^2 * Hq * D.
  return {.bytes = bytes, .flops = 2.0 * context * context * q_heads * head_dim, .is_prefill = true};
}

ProfileCostModel::ProfileCostModel(GpuProfile profile, GpuSpec fallback, std::string name)
    : profile_(std::move(profile)), fallback_(std::move(fallback)), name_(std::move(name)) {
  for (std::size_t i = 0; i < grouped_.size(); ++i) {
    const auto p = static_cast<Precision>(i);
    if (const OperationFit* f = profile_.find_fit(CostOp::kGroupedExperts, p)) {
      grouped_[i] = f->params;
    } else if (const OperationFit* b = profile_.find_fit(CostOp::kGroupedExperts, Precision::kBF16)) {
      grouped_[i] = b->params;
      grouped_[i]->flops_per_s *= profile_.rate_scale_of(p);
    }
  }
  const std::array<CostOp, 3> ops{CostOp::kSmallKernel, CostOp::kPermute, CostOp::kUnpermute};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (const OperationFit* f = profile_.find_fit(ops[i], Precision::kBF16)) memory_[i] = f->params;
  }
}

Duration ProfileCostModel::gemm(const GemmWork& w) const {
  if (w.m <= 0) return Duration::zero();
  const BytesFlops bf = work_bytes_flops(w);
  if (auto s = profile_.seconds(CostOp::kGemm, w.weights, w.n, w.k, bf.bytes, bf.flops)) {
    return Duration::from_seconds(*s);
  }
  return RooflineCostModel(fallback_).gemm(w);
}

Duration ProfileCostModel::expert_ffn(const ExpertFfnWork& w) const {
  if (w.tokens <= 0) return Duration::zero();
  const BytesFlops bf = work_bytes_flops(w);
  if (auto s = profile_.seconds(CostOp::kExpertFfn, w.weights, w.hidden, w.inter, bf.bytes, bf.flops)) {
    const double loop = w.in_loop ? profile_.loop_fixed_delta_s(w.weights, w.hidden, w.inter) : 0.0;
    return Duration::from_seconds(*s + loop);
  }
  return RooflineCostModel(fallback_).expert_ffn(w);
}

Duration ProfileCostModel::grouped_experts(const GroupedExpertsWork& w) const {
  if (w.tokens <= 0 || w.experts <= 0) return Duration::zero();
  const auto& fit = grouped_[static_cast<std::size_t>(w.weights)];
  if (!fit) return RooflineCostModel(fallback_).grouped_experts(w);
  const BytesFlops bf = grouped_stream_bytes_flops(w, grouped_occupancy_stretch(w, fallback_));
  return Duration::from_seconds(fit->seconds(bf.bytes, bf.flops));
}

Duration ProfileCostModel::memory_kernel(MemoryKernel k, double bytes) const {
  const std::size_t i = k == MemoryKernel::kGather ? 1 : k == MemoryKernel::kScatterAdd ? 2 : 0;
  if (memory_[i]) return Duration::from_seconds(memory_[i]->seconds(bytes, 0.0));
  return RooflineCostModel(fallback_).memory_kernel(k, bytes);
}

// TensorRT-LLM's trtllm-gen MLA decode kernel where the engine runs it, its KV is FP8 and the GPU has its
// measured rate: the larger of its flops at that rate and its bytes at the datasheet HBM bandwidth (its
// measured run is at the ridge of the two, docs/validation/blackwell_sources.md B11). No fixed cost was
// measured (one run, a persistent kernel). Otherwise nullopt: the fit.
namespace {
std::optional<double> trtllm_gen_decode_seconds(const AttentionWork& w, const GpuSpec& gpu) {
  const MeasuredFigure& m = gpu.measured.attention_decode_trtllm_gen_fp8;
  if (w.is_prefill || w.kernel != DecodeAttentionKernel::kTrtllmGen || w.kv != Precision::kFP8 ||
      !m.known() || gpu.fp8_flops_per_s <= 0) {
    return std::nullopt;
  }
  return std::max(w.flops / (m.value * gpu.fp8_flops_per_s), w.bytes / gpu.hbm_bytes_per_s);
}
}  // namespace

Duration ProfileCostModel::attention(const AttentionWork& w) const {
  if (w.bytes <= 0 && w.flops <= 0) return Duration::zero();
  if (auto s = trtllm_gen_decode_seconds(w, fallback_)) return Duration::from_seconds(*s);
  const CostOp op = w.is_prefill ? CostOp::kAttentionPrefill : CostOp::kAttentionDecode;
  // The KV format's own fit, else BF16's at BF16's rate (attention math is not a weight GEMM: no rate_scale).
  const OperationFit* f = profile_.find_fit(op, w.kv);
  if (f == nullptr) f = profile_.find_fit(op, Precision::kBF16);
  if (f != nullptr) return Duration::from_seconds(f->params.seconds(w.bytes, w.flops));
  return RooflineCostModel(fallback_).attention(w);
}

std::string ProfileCostModel::source() const {
  std::string s = "profile " + name_;
  std::string missing;
  for (CostOp op : {CostOp::kGemm, CostOp::kExpertFfn, CostOp::kAttentionDecode, CostOp::kAttentionPrefill,
                    CostOp::kGroupedExperts, CostOp::kPermute, CostOp::kUnpermute, CostOp::kSmallKernel}) {
    if (profile_.find_fit(op, Precision::kBF16) == nullptr) {
      missing += missing.empty() ? "" : ", ";
      missing += to_string(op);
    }
  }
  if (!missing.empty()) s += " (roofline for " + missing + ")";
  return s;
}

}  // namespace moesim
