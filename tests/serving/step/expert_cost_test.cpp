#include "sim/serving/step/expert_cost.h"

#include <catch2/catch.hpp>
#include <vector>

#include "hwmodels/gpu_spec.h"
#include "hwmodels/roofline_cost_model.h"
#include "tests/support/test_gpu.h"

using namespace moesim;

namespace {
GpuSpec h200() { return moesim_test::h200_like(); }

constexpr std::int64_t kHidden = 7168;
constexpr std::int64_t kInter = 2048;

ExpertCost make_cost(const GpuCostModel& gpu, bool grouped, std::vector<Precision> precisions, int ranks = 2,
                     ExpertKernelFamily family = ExpertKernelFamily::kCutlassGrouped) {
  std::array<double, kPrecisionCount> dequant;
  dequant.fill(1.0);
  return ExpertCost(
      gpu,
      ExpertCostShape{
          .grouped = grouped, .hidden = kHidden, .inter = kInter, .max_tokens = 4096, .family = family},
      ranks, 16, precisions, dequant);
}

Duration launch(const GpuCostModel& gpu, std::int64_t experts, std::int64_t tokens, Precision p) {
  return gpu.grouped_experts(GroupedExpertsWork{
      .experts = experts, .tokens = tokens, .hidden = kHidden, .inter = kInter, .weights = p});
}

Duration loop_ffn(const GpuCostModel& gpu, std::int64_t tokens, Precision p) {
  return gpu.expert_ffn(
      ExpertFfnWork{.tokens = tokens, .hidden = kHidden, .inter = kInter, .weights = p, .in_loop = true});
}
}  // namespace

TEST_CASE("a grouped engine launches a rank's experts of one format as one launch") {
  const RooflineCostModel gpu(h200());
  ExpertCost cost = make_cost(gpu, true, {Precision::kFP8});
  cost.begin_layer();
  cost.add_copy(0, Precision::kFP8, 10, 0, 1e6);
  cost.add_copy(0, Precision::kFP8, 30, 0, 1e6);
  cost.add_copy(1, Precision::kFP8, 5, 0, 1e6);
  cost.finish_layer();
  CHECK(cost.time(0) == launch(gpu, 2, 40, Precision::kFP8));
  CHECK(cost.time(1) == launch(gpu, 1, 5, Precision::kFP8));
  CHECK(cost.pairs(0) == 40.0);
  CHECK(cost.touched(0, 0) == 2);
  CHECK(cost.weight_bytes(0) == 2e6);  // each copy's weights once: one launch
}

TEST_CASE("copies at several precisions cost one grouped launch per format") {
  const RooflineCostModel gpu(h200());
  ExpertCost cost = make_cost(gpu, true, {Precision::kFP8, Precision::kINT4});
  cost.begin_layer();
  cost.add_copy(0, Precision::kFP8, 10, 0, 1e6);
  cost.add_copy(0, Precision::kINT4, 20, 0, 3e5);
  cost.add_copy(0, Precision::kFP8, 12, 0, 1e6);
  cost.finish_layer();
  CHECK(cost.time(0) == launch(gpu, 2, 22, Precision::kFP8) + launch(gpu, 1, 20, Precision::kINT4));
  CHECK(cost.weight_bytes(0) == Approx(2e6 + 3e5));
}

TEST_CASE("every copy at one precision costs what an unquantised layer at that precision costs") {
  // The same copies through an expert cost that knows three formats and one that knows only FP8: when every
  // copy is FP8 the launches are the same.
  const RooflineCostModel gpu(h200());
  ExpertCost three = make_cost(gpu, true, {Precision::kFP8, Precision::kINT8, Precision::kINT4});
  ExpertCost one = make_cost(gpu, true, {Precision::kFP8});
  for (ExpertCost* c : {&three, &one}) {
    c->begin_layer();
    for (int e = 0; e < 8; ++e) c->add_copy(e % 2, Precision::kFP8, 3 + e, e % 3, 1e6);
    c->finish_layer();
  }
  for (int r = 0; r < 2; ++r) {
    CHECK(three.time(r) == one.time(r));
    CHECK(three.weight_bytes(r) == one.weight_bytes(r));
  }
}

TEST_CASE("under two-batch overlap each micro-batch's launch reads the weights it runs") {
  const RooflineCostModel gpu(h200());
  for (const bool grouped : {true, false}) {
    INFO((grouped ? "grouped" : "per-expert loop"));
    ExpertCost cost = make_cost(gpu, grouped, {Precision::kBF16});
    cost.begin_layer();
    cost.add_copy(0, Precision::kBF16, 4, 3, 1e6);  // tokens in both micro-batches: two launches read it
    cost.add_copy(0, Precision::kBF16, 2, 0, 1e6);  // only in A: one
    cost.finish_layer();
    CHECK(cost.weight_bytes(0) == 3e6);
    CHECK(cost.touched(0, 0) == 2);
    CHECK(cost.touched(0, 1) == 1);
    if (grouped) {
      CHECK(cost.half_time(0, 0) == launch(gpu, 2, 6, Precision::kBF16));
      CHECK(cost.half_time(0, 1) == launch(gpu, 1, 3, Precision::kBF16));
    } else {
      CHECK(cost.half_time(0, 0) == loop_ffn(gpu, 4, Precision::kBF16) + loop_ffn(gpu, 2, Precision::kBF16));
      CHECK(cost.half_time(0, 1) == loop_ffn(gpu, 3, Precision::kBF16));
    }
  }
}

TEST_CASE("a per-expert engine pays one in-loop FFN per copy, at any token count") {
  // The memo covers 4,096 tokens; beyond it the FFN is costed directly, still as one launch of the loop.
  const RooflineCostModel gpu(h200());
  ExpertCost cost = make_cost(gpu, false, {Precision::kFP8, Precision::kINT4});
  cost.begin_layer();
  cost.add_copy(0, Precision::kFP8, 100, 0, 1e6);
  cost.add_copy(0, Precision::kINT4, 9000, 0, 1e6);
  cost.finish_layer();
  CHECK(cost.time(0) == loop_ffn(gpu, 100, Precision::kFP8) + loop_ffn(gpu, 9000, Precision::kINT4));
  CHECK(cost.expert_ffn(9000, Precision::kINT4) == loop_ffn(gpu, 9000, Precision::kINT4));
}

TEST_CASE("late copies run as a launch of their own after the ready ones") {
  const RooflineCostModel gpu(h200());
  ExpertCost cost = make_cost(gpu, true, {Precision::kFP8});
  cost.begin_layer();
  cost.add_copy(0, Precision::kFP8, 10, 0, 1e6);
  cost.add_copy(0, Precision::kFP8, 20, 0, 1e6, /*late=*/true);
  cost.add_copy(0, Precision::kFP8, 30, 0, 1e6);
  cost.finish_layer();
  CHECK(cost.ready_time(0) == launch(gpu, 2, 40, Precision::kFP8));
  CHECK(cost.late_time(0) == launch(gpu, 1, 20, Precision::kFP8));
  CHECK(cost.time(0) == cost.ready_time(0) + cost.late_time(0));
}

TEST_CASE("per-rank sums cost what the same copies handed one by one cost") {
  const RooflineCostModel gpu(h200());
  ExpertCost copies = make_cost(gpu, true, {Precision::kFP8});
  ExpertCost sums = make_cost(gpu, true, {Precision::kFP8});
  copies.begin_layer();
  sums.begin_layer();
  const std::vector<std::pair<int, int>> halves = {{5, 2}, {7, 0}, {1, 1}, {0, 4}};
  int ta = 0, tb = 0, pa = 0, pb = 0;
  for (const auto& [a, b] : halves) {
    copies.add_copy(1, Precision::kFP8, a, b, 5e5);
    ta += a > 0;
    tb += b > 0;
    pa += a;
    pb += b;
  }
  sums.add_sums(1, 0, Precision::kFP8, ta, pa, 5e5);
  sums.add_sums(1, 1, Precision::kFP8, tb, pb, 5e5);
  copies.finish_layer();
  sums.finish_layer();
  CHECK(sums.half_time(1, 0) == copies.half_time(1, 0));
  CHECK(sums.half_time(1, 1) == copies.half_time(1, 1));
  CHECK(sums.weight_bytes(1) == copies.weight_bytes(1));
  CHECK(sums.pairs(1) == copies.pairs(1));
}

TEST_CASE("the grouped memo returns what the cost model gives, shared or not") {
  const RooflineCostModel gpu(h200());
  ExpertCost a = make_cost(gpu, true, {Precision::kFP8, Precision::kINT4});
  ExpertCost b = make_cost(gpu, true, {Precision::kFP8, Precision::kINT4});
  b.share_memo(a.memo());
  for (int i = 0; i < 3; ++i) {  // the second and third asks hit the memo
    CHECK(a.grouped(3, 100, Precision::kFP8) == launch(gpu, 3, 100, Precision::kFP8));
    CHECK(b.grouped(3, 100, Precision::kINT4) == launch(gpu, 3, 100, Precision::kINT4));
    CHECK(b.grouped(3, 100 + 8192, Precision::kINT4) == launch(gpu, 3, 8292, Precision::kINT4));
    // Counts one row apart share a slot: each ask still gets its own count's time.
    constexpr auto kRow = static_cast<std::int64_t>(ExpertCost::GroupedMemo::kRow);
    CHECK(a.grouped(1, 17000, Precision::kFP8) == launch(gpu, 1, 17000, Precision::kFP8));
    CHECK(a.grouped(1, 17000 + kRow, Precision::kFP8) == launch(gpu, 1, 17000 + kRow, Precision::kFP8));
  }
}

TEST_CASE("a grouped launch costs the fit times its kernel family's factor at its rows per expert") {
  const RooflineCostModel gpu(h200());
  ExpertCost triton = make_cost(gpu, true, {Precision::kFP8}, 2, ExpertKernelFamily::kTritonFusedMoe);
  ExpertCost cutlass = make_cost(gpu, true, {Precision::kFP8});
  for (ExpertCost* c : {&triton, &cutlass}) {
    c->begin_layer();
    c->add_copy(0, Precision::kFP8, 1, 0, 1e6);  // rank 0: two experts, one row each
    c->add_copy(0, Precision::kFP8, 1, 0, 1e6);
    c->add_copy(1, Precision::kFP8, 300, 0, 1e6);  // rank 1: one expert, 300 rows
    c->finish_layer();
  }
  // The fit's own kernel (CUTLASS grouped) is the fit.
  CHECK(cutlass.time(0) == launch(gpu, 2, 2, Precision::kFP8));
  CHECK(cutlass.time(1) == launch(gpu, 1, 300, Precision::kFP8));
  // Triton fused_moe: 1 row per expert -> 2.6 / 3.3 = 0.787879 (vLLM PR 13972); 300 rows -> 11.502 / 10.218
  // = 1.12566 (VeOmni PR 460).
  CHECK(triton.time(0).ps() ==
        Approx(double(launch(gpu, 2, 2, Precision::kFP8).ps()) * 0.787879).epsilon(1e-5));
  CHECK(triton.time(1).ps() ==
        Approx(double(launch(gpu, 1, 300, Precision::kFP8).ps()) * 1.12566).epsilon(1e-5));
}
