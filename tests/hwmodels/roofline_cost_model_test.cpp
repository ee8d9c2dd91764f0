#include "hwmodels/roofline_cost_model.h"

#include <catch2/catch.hpp>

#include "tests/support/test_gpu.h"

using namespace moesim;

namespace {
GpuSpec h200() { return moesim_test::h200_like(); }
}  // namespace

TEST_CASE("a one-token expert is memory-bound: its time is reading the weights once") {
  const RooflineCostModel m(h200());
  const ExpertFfnWork w{.tokens = 1, .hidden = 7168, .inter = 2048, .weights = Precision::kBF16};
  const double weight_bytes = 3.0 * 7168 * 2048 * 2;
  const double act_bytes = 2.0 * (2 * 7168 + 3 * 2048);
  const double expected = 3 * 2e-6 + (weight_bytes + act_bytes) / (4.8e12 * 0.75);
  REQUIRE(m.expert_ffn(w).seconds() == Approx(expected).epsilon(1e-6));
}

TEST_CASE("a large expert batch is compute-bound at the precision's peak") {
  const RooflineCostModel m(h200());
  const ExpertFfnWork w{.tokens = 8192, .hidden = 7168, .inter = 2048, .weights = Precision::kFP8};
  const double flops = 6.0 * 8192 * 7168 * 2048;
  REQUIRE(m.expert_ffn(w).seconds() == Approx(3 * 2e-6 + flops / (1979e12 * 0.75)).epsilon(1e-6));
}

TEST_CASE("FP8 weights halve the memory-bound time of a GEMM") {
  const RooflineCostModel m(h200());
  const Duration bf16 = m.gemm(GemmWork{.m = 1, .n = 16384, .k = 16384, .weights = Precision::kBF16});
  const Duration fp8 = m.gemm(GemmWork{.m = 1, .n = 16384, .k = 16384, .weights = Precision::kFP8});
  const double ovh = 2e-6;
  REQUIRE((bf16.seconds() - ovh) / (fp8.seconds() - ovh) == Approx(2.0).epsilon(1e-3));
}

TEST_CASE("zero tokens cost nothing") {
  const RooflineCostModel m(h200());
  REQUIRE(m.expert_ffn(ExpertFfnWork{.tokens = 0, .hidden = 10, .inter = 10}) == Duration::zero());
  REQUIRE(m.gemm(GemmWork{.m = 0, .n = 10, .k = 10}) == Duration::zero());
}
