// The calibrated GPU cost model: a GpuCostModel whose parameters were fitted to measurements of one GPU
// (hwmodels/calibration_fit.h fits them; sim/scenario/profile_io.h reads and writes them as JSON).
// A GpuProfile is a plain struct: hwmodels never sees JSON.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hwmodels/gpu_cost_model.h"
#include "hwmodels/gpu_spec.h"
#include "hwmodels/precision.h"

namespace moesim {

// The operations a profile fits, each with its own parameters. kPermute/kUnpermute are the local sides
// of dispatch and combine (row gather into expert order, weighted scatter-add back). kGroupedExperts is
// one grouped expert launch per GPU and layer; kExpertLoop holds the per-expert fixed cost of expert FFN
// kernels run back to back (its other parameters echo the expert FFN fit it was made against);
// kSmallKernel is any other small memory-bound kernel of a layer (norm, residual add, top-k, sort).
enum class CostOp : std::uint8_t {
  kGemm,
  kExpertFfn,
  kAttentionDecode,
  kAttentionPrefill,
  kPermute,
  kUnpermute,
  kGroupedExperts,
  kExpertLoop,
  kSmallKernel
};
[[nodiscard]] std::string_view to_string(CostOp op);
[[nodiscard]] std::optional<CostOp> parse_cost_op(std::string_view s);

// The per-operation model, fitted by calibration_fit:
//   t = fixed + (t_mem^p + t_compute^p)^(1/p),  t_mem = bytes / bytes_per_s,  t_compute = flops /
//   flops_per_s.
// Source: the roofline (Williams, Waterman, Patterson, "Roofline", CACM 52(4), 2009) takes the larger of
// t_mem and t_compute; the p-norm (generalised mean) is the usual smooth maximum, so one parameter
// `sharpness` = p captures the partial overlap near the ridge point (p = 1: no overlap, the sum; p -> inf:
// the max). `fixed` is the per-kernel cost (launch inside a CUDA graph, pipeline fill, tail wave) that shows
// at small sizes (shared/calibration/h200/README.md: "a fixed cost of a few microseconds per kernel").
struct RooflineFit {
  double fixed_s = 0;
  double bytes_per_s = 1;
  double flops_per_s = 1;
  double sharpness = 4;
  [[nodiscard]] double seconds(double bytes, double flops) const;
};

// A fit for one operation and weight precision: for every shape (shape_a = shape_b = 0), or for one
// measured shape (GEMM: N, K; expert FFN: hidden, inter), which then takes precedence for that shape.
struct OperationFit {
  CostOp op = CostOp::kGemm;
  Precision precision = Precision::kBF16;
  std::int64_t shape_a = 0;
  std::int64_t shape_b = 0;
  RooflineFit params;
};

// One measurement: the work it did (as bytes moved and flops computed, by the conventions of
// work_bytes_flops below) and the time it took. `parts_s` holds the times of its component kernels when
// they were measured (up and down GEMM of an expert FFN); the anomaly rule also looks at them.
struct CalibrationPoint {
  CostOp op = CostOp::kGemm;
  Precision precision = Precision::kBF16;
  std::string sweep;         // points of one sweep differ only in size, e.g. "gemm N=4096 K=7168"
  std::string label;         // e.g. "M=128"
  std::int64_t shape_a = 0;  // as OperationFit: GEMM N, K; expert FFN hidden, inter; else 0
  std::int64_t shape_b = 0;
  double bytes = 0;
  double flops = 0;
  double seconds = 0;
  std::vector<double> parts_s;
  bool is_anomaly = false;
  // kGroupedExperts and kExpertLoop: the token count of every local expert (shape_a, shape_b = H, I).
  std::vector<std::int32_t>
      counts;  // set by flag_anomalies(): kept in reports, left out of fits and max checks
};

struct GpuProfile {
  std::string gpu;     // catalog name, e.g. "h200-sxm"
  std::string origin;  // what was measured, how, when
  std::vector<OperationFit> fits;
  // Compute rate of a weight precision relative to BF16 for operations fitted in BF16 only (measured GEMM
  // ceilings, e.g. fp8 8192^3 / bf16 8192^3). Precisions not listed run at the BF16 rate (dequantised).
  std::vector<std::pair<Precision, double>> rate_scale;
  std::vector<CalibrationPoint> points;  // the raw measurements the fits came from

  // The fit of exactly this shape, else the all-shapes fit; nullptr when neither exists. O(fits).
  [[nodiscard]] const OperationFit* find_fit(CostOp op, Precision p, std::int64_t shape_a = 0,
                                             std::int64_t shape_b = 0) const;
  [[nodiscard]] double rate_scale_of(Precision p) const;
  // Predicted seconds: the fit of (op, p, shape), else the BF16 fit of that shape with its compute rate
  // scaled by rate_scale_of(p); nullopt when the profile has no fit for `op`.
  [[nodiscard]] std::optional<double> seconds(CostOp op, Precision p, std::int64_t shape_a,
                                              std::int64_t shape_b, double bytes, double flops) const;
  // Per-kernel fixed cost of an expert FFN inside a loop of them, minus that of one alone (<= 0); 0
  // without a kExpertLoop fit.
  [[nodiscard]] double loop_fixed_delta_s(Precision p, std::int64_t hidden, std::int64_t inter) const;
};

// Work conventions shared by the fitter (turning measurements into bytes and flops) and the cost model.
// GEMM: weights once plus BF16 activations in and out; expert FFN: weights once plus x in, y out and the
// 2I-wide intermediate written and read back (as RooflineCostModel); flops 2MNK and 6THI.
struct BytesFlops {
  double bytes = 0;
  double flops = 0;
};
[[nodiscard]] BytesFlops work_bytes_flops(const GemmWork& w);
[[nodiscard]] BytesFlops work_bytes_flops(const ExpertFfnWork& w);
// Grouped experts: the touched experts' weights once, x in and y out per pair, the 2I-wide intermediate
// written and read back per pair (the same per-pair traffic as ExpertFfnWork); flops 6 * pairs * H * I.
[[nodiscard]] BytesFlops work_bytes_flops(const GroupedExpertsWork& w);
// The SM under-fill stretch of a grouped launch's weight streaming (hwmodels/grouped_gemm_tiles.h) on `gpu`:
// for BF16 weights under the CUTLASS grouped kernel (torch._grouped_mm, the fit's own) on Hopper (or a spec
// without an arch: the profile's own GPU while calibrating) and Blackwell; 1 elsewhere (no tiling source).
[[nodiscard]] double grouped_occupancy_stretch(const GroupedExpertsWork& w, const GpuSpec& gpu);
// work_bytes_flops(w) with the experts' weight bytes counted `stretch` times: what the fit's bandwidth moves
// in the time the under-filled kernel takes.
[[nodiscard]] BytesFlops grouped_stream_bytes_flops(const GroupedExpertsWork& w, double stretch);
// Attention core with `q_heads`/`kv_heads` of `head_dim` in BF16: decode reads the KV cache of `batch`
// sequences of `context` tokens (one query each); prefill is one causal sequence of `context` tokens
// (half of the 4*L^2*Hq*D flops of full attention).
[[nodiscard]] AttentionWork decode_attention_work(double batch, double context, double q_heads,
                                                  double kv_heads, double head_dim);
[[nodiscard]] AttentionWork prefill_attention_work(double context, double q_heads, double kv_heads,
                                                   double head_dim);

class ProfileCostModel final : public GpuCostModel {
 public:
  // `fallback` costs the operations the profile has no fit for; `name` names the profile in source().
  ProfileCostModel(GpuProfile profile, GpuSpec fallback, std::string name);
  [[nodiscard]] Duration gemm(const GemmWork& w) const override;
  [[nodiscard]] Duration expert_ffn(const ExpertFfnWork& w) const override;
  [[nodiscard]] Duration attention(const AttentionWork& w) const override;
  [[nodiscard]] Duration grouped_experts(const GroupedExpertsWork& w) const override;
  [[nodiscard]] Duration memory_kernel(MemoryKernel k, double bytes) const override;
  [[nodiscard]] std::string source() const override;

  [[nodiscard]] const GpuProfile& profile() const { return profile_; }

 private:
  GpuProfile profile_;
  GpuSpec fallback_;
  std::string name_;
  // Resolved once (the planner calls these per GPU and layer): the grouped-experts fit by weight format
  // (its own, else the BF16 fit at the format's rate), and the memory-kernel fits; nullopt: roofline.
  std::array<std::optional<RooflineFit>, 7> grouped_;
  std::array<std::optional<RooflineFit>, 3> memory_;
};

}  // namespace moesim
