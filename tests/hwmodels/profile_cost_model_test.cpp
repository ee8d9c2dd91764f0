// The profile cost model: times from fitted parameters, shape and precision lookup, roofline fallback.
#include "hwmodels/profile_cost_model.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "hwmodels/roofline_cost_model.h"

namespace moesim {
namespace {

GpuSpec spec() {
  GpuSpec g;
  g.name = "test-gpu";
  g.hbm_bytes_per_s = 4.8e12;
  g.bf16_flops_per_s = 989e12;
  g.fp8_flops_per_s = 1979e12;
  return g;
}

const RooflineFit kGemm{.fixed_s = 5e-6, .bytes_per_s = 4e12, .flops_per_s = 750e12, .sharpness = 3};

GpuProfile profile() {
  GpuProfile p;
  p.gpu = "test-gpu";
  p.fits.push_back(
      {.op = CostOp::kGemm, .precision = Precision::kBF16, .shape_a = 0, .shape_b = 0, .params = kGemm});
  p.rate_scale = {{Precision::kFP8, 1.8}};
  return p;
}

double model_seconds(const RooflineFit& f, double bytes, double flops) {
  const double a = bytes / f.bytes_per_s;
  const double c = flops / f.flops_per_s;
  return f.fixed_s + std::pow(std::pow(a, f.sharpness) + std::pow(c, f.sharpness), 1.0 / f.sharpness);
}

}  // namespace

TEST_CASE("the smooth maximum lies between the larger term and the sum") {
  for (double p : {1.0, 2.0, 4.0, 32.0}) {
    const RooflineFit f{.fixed_s = 0, .bytes_per_s = 1, .flops_per_s = 1, .sharpness = p};
    CHECK(f.seconds(3, 4) == Approx(std::pow(std::pow(3.0, p) + std::pow(4.0, p), 1 / p)));
    CHECK(f.seconds(3, 4) >= 4);
    CHECK(f.seconds(3, 4) <= 7 + 1e-12);
  }
  CHECK(RooflineFit{.fixed_s = 2, .bytes_per_s = 1, .flops_per_s = 1, .sharpness = 4}.seconds(0, 0) == 2);
}

TEST_CASE("a GEMM costs the fitted model of its bytes and flops") {
  const ProfileCostModel m(profile(), spec(), "test.json");
  const GemmWork w{.m = 256, .n = 4096, .k = 7168, .weights = Precision::kBF16};
  const double bytes = 4096.0 * 7168 * 2 + 2.0 * (256.0 * 7168 + 256.0 * 4096);
  const double flops = 2.0 * 256 * 4096 * 7168;
  CHECK(m.gemm(w).seconds() == Approx(model_seconds(kGemm, bytes, flops)).epsilon(1e-6));
}

TEST_CASE("FP8 weights halve the weight bytes and run at the measured FP8 rate") {
  const ProfileCostModel m(profile(), spec(), "test.json");
  const GemmWork w{.m = 8192, .n = 4096, .k = 7168, .weights = Precision::kFP8};
  const double bytes = 4096.0 * 7168 * 1 + 2.0 * (8192.0 * 7168 + 8192.0 * 4096);
  RooflineFit fp8 = kGemm;
  fp8.flops_per_s *= 1.8;
  CHECK(m.gemm(w).seconds() == Approx(model_seconds(fp8, bytes, gemm_flops(w))).epsilon(1e-6));
}

TEST_CASE("a precision without a measured scale runs at the BF16 rate") {
  const ProfileCostModel m(profile(), spec(), "test.json");
  const GemmWork w{.m = 8192, .n = 4096, .k = 7168, .weights = Precision::kINT4};
  const double bytes = 4096.0 * 7168 * 0.5 + 2.0 * (8192.0 * 7168 + 8192.0 * 4096);
  CHECK(m.gemm(w).seconds() == Approx(model_seconds(kGemm, bytes, gemm_flops(w))).epsilon(1e-6));
}

TEST_CASE("a shape-specific fit wins for its shape only") {
  GpuProfile p = profile();
  const RooflineFit slow{.fixed_s = 50e-6, .bytes_per_s = 1e12, .flops_per_s = 100e12, .sharpness = 2};
  p.fits.push_back(
      {.op = CostOp::kGemm, .precision = Precision::kBF16, .shape_a = 2048, .shape_b = 2048, .params = slow});
  const ProfileCostModel m(p, spec(), "test.json");
  const GemmWork own{.m = 64, .n = 2048, .k = 2048, .weights = Precision::kBF16};
  const GemmWork other{.m = 64, .n = 2048, .k = 4096, .weights = Precision::kBF16};
  const BytesFlops a = work_bytes_flops(own);
  const BytesFlops b = work_bytes_flops(other);
  CHECK(m.gemm(own).seconds() == Approx(model_seconds(slow, a.bytes, a.flops)).epsilon(1e-6));
  CHECK(m.gemm(other).seconds() == Approx(model_seconds(kGemm, b.bytes, b.flops)).epsilon(1e-6));
}

TEST_CASE("operations the profile lacks are costed by the roofline, and the source says so") {
  const ProfileCostModel m(profile(), spec(), "hwmodels/profiles/test-gpu.json");
  const RooflineCostModel roof(spec());
  const ExpertFfnWork e{.tokens = 64, .hidden = 7168, .inter = 2048, .weights = Precision::kBF16};
  CHECK(m.expert_ffn(e) == roof.expert_ffn(e));
  const AttentionWork a{.bytes = 1e8, .flops = 1e11, .is_prefill = false};
  CHECK(m.attention(a) == roof.attention(a));
  CHECK(m.source().find("profile hwmodels/profiles/test-gpu.json") == 0);
  CHECK(m.source().find("expert_ffn") != std::string::npos);
}

TEST_CASE("no work costs nothing") {
  GpuProfile p = profile();
  p.fits.push_back(
      {.op = CostOp::kExpertFfn, .precision = Precision::kBF16, .shape_a = 0, .shape_b = 0, .params = kGemm});
  const ProfileCostModel m(p, spec(), "test.json");
  CHECK(m.expert_ffn(ExpertFfnWork{
            .tokens = 0, .hidden = 7168, .inter = 2048, .weights = Precision::kBF16}) == Duration::zero());
  CHECK(m.gemm(GemmWork{.m = 0, .n = 4096, .k = 7168, .weights = Precision::kBF16}) == Duration::zero());
  CHECK(m.attention(AttentionWork{}) == Duration::zero());
}

TEST_CASE("attention work follows the GQA decode and causal prefill conventions") {
  const AttentionWork d = decode_attention_work(16, 4096, 32, 8, 128);
  CHECK(d.bytes == Approx(16.0 * 4096 * 2 * 8 * 128 * 2 + 16.0 * 2 * 32 * 128 * 2));
  CHECK(d.flops == Approx(4.0 * 16 * 4096 * 32 * 128));
  const AttentionWork p = prefill_attention_work(4096, 32, 8, 128);
  CHECK(p.is_prefill);
  CHECK(p.flops == Approx(0.5 * 4.0 * 4096.0 * 4096 * 32 * 128));
}

TEST_CASE("operation names round-trip") {
  for (CostOp op : {CostOp::kGemm, CostOp::kExpertFfn, CostOp::kAttentionDecode, CostOp::kAttentionPrefill,
                    CostOp::kPermute, CostOp::kUnpermute}) {
    CHECK(parse_cost_op(to_string(op)) == op);
  }
  CHECK_FALSE(parse_cost_op("gemv").has_value());
}

}  // namespace moesim
