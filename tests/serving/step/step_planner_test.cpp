#include "sim/serving/step/step_planner.h"

#include <catch2/catch.hpp>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/experts/expert_loop.h"
#include "sim/serving/step/serving_models.h"

using namespace moesim;

namespace {
// Two GPUs in one node, 4 experts of which every token picks 2 (top-2), one attention group per GPU; the
// fit's own expert kernel (cutlass_grouped), so a grouped launch costs what grouped_experts gives.
ScenarioSpec two_gpu_spec() {
  const Json j = Json::parse(R"({
    "model": {"num_layers": 1, "hidden": 1024, "vocab": 1000, "attention": "gqa", "num_heads": 8,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 4, "top_k": 2, "expert_inter": 512},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 2},
    "deployment": {"ep_size": 2, "max_batched_tokens": 1024, "expert_kernel": "cutlass_grouped"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  return parse_scenario(j, "").spec;
}

std::vector<GroupBatch> decode_batches(std::int64_t seqs_per_group) {
  GroupBatch b;
  b.decode_seqs = seqs_per_group;
  b.decode_context_tokens = static_cast<double>(seqs_per_group) * 100;
  b.sampled_seqs = seqs_per_group;
  return {b, b};
}
}  // namespace

TEST_CASE("a layer waits for its slowest GPU") {
  const ScenarioSpec s = two_gpu_spec();
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  // Contiguous placement: experts 0,1 on GPU 0 and 2,3 on GPU 1. Top-2 with p = (1/2, 1/2, 0, 0): every
  // token picks experts 0 and 1, so GPU 0 does all the expert work.
  ExpertPopularity skewed(PopularitySpec{}, 1, 4, 2, Rng(1));
  const std::vector<double> hot = {0.5, 0.5, 0.0, 0.0};
  std::copy(hot.begin(), hot.end(), skewed.mutable_layer(0).begin());
  StepPlanner planner(s, gpu, fabric, skewed, Rng(2));
  const auto batches = decode_batches(64);
  const StepPlan& p = planner.plan(batches, Time{});
  const double t = 128;  // both groups' tokens
  // The default engine (vllm) runs GPU 0's two experts of 128 tokens as one grouped launch; GPU 1 idles.
  const Duration grouped =
      gpu.grouped_experts(GroupedExpertsWork{.experts = 2, .tokens = 256, .hidden = 1024, .inter = 512});
  REQUIRE(p.part(StepPart::kExperts) == grouped);
  REQUIRE(planner.gpu_busy_s()[0] > planner.gpu_busy_s()[1]);
  REQUIRE(p.gpu_imbalance == Approx(2.0));  // max/mean of (2t, 0)
  (void)t;

  // Balanced: p = (1/4,...): every token still picks 2 of 4; the expected expert time per GPU is lower.
  const ExpertPopularity uniform(PopularitySpec{}, 1, 4, 2, Rng(1));
  StepPlanner balanced(s, gpu, fabric, uniform, Rng(2));
  REQUIRE(balanced.plan(batches, Time{}).part(StepPart::kExperts) < p.part(StepPart::kExperts));
}

TEST_CASE("a lost GPU's copies are vacant: the surviving copy takes all its expert's pairs") {
  // Two MoE layers of 4 experts on 2 GPUs with two redundant slots each: EPLB, placing by uniform loads,
  // gives every expert a second copy, spread over the two GPUs. Routing is top-2 with p = (1/2, 1/2, 0, 0):
  // every token picks experts 0 and 1.
  Json j = Json::parse(R"({
    "model": {"num_layers": 2, "hidden": 1024, "vocab": 1000, "attention": "gqa", "num_heads": 8,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 4, "top_k": 2, "expert_inter": 512},
    "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 2},
    "deployment": {"ep_size": 2, "max_batched_tokens": 1024, "expert_kernel": "cutlass_grouped"},
    "experts": {"placement": "eplb", "redundant_slots_per_gpu": 2},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  ScenarioSpec s = parse_scenario(j, "").spec;
  s.faults.spread_copies = true;  // faults.spread_copies (a scenario with faults sets it)
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  ExpertPopularity hot(PopularitySpec{}, 2, 4, 2, Rng(1));
  for (int l = 0; l < 2; ++l) {
    const std::vector<double> p = {0.5, 0.5, 0.0, 0.0};
    std::copy(p.begin(), p.end(), hot.mutable_layer(l).begin());
  }
  const std::vector<double> uniform(4, 0.25);
  StandalonePlanner sp;
  sp.loop = std::make_unique<ExpertLoop>(
      s, fabric, [&](int) { return std::span<const double>(uniform); }, nullptr);
  sp.planner = std::make_unique<StepPlanner>(s, gpu, fabric, hot, Rng(2), nullptr, nullptr, sp.loop.get());
  // Each expert has a copy on each GPU, GPU 0's first (slots ascending): GPU 0's copy is replica rank 0.
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 4; ++e) {
      const auto copies = sp.planner->placement().slots_of(l, e);
      REQUIRE(copies.size() == 2);
      REQUIRE(sp.planner->placement().gpu_of_slot(copies[0]) == 0);
      REQUIRE(sp.planner->placement().gpu_of_slot(copies[1]) == 1);
    }
  }
  // GPU 1's attention group is gone with it: only group 0 has tokens (T = 101, odd: the split is uneven).
  GroupBatch b;
  b.decode_seqs = 101;
  b.decode_context_tokens = 101.0 * 100;
  b.sampled_seqs = 101;
  const std::vector<GroupBatch> batches = {b, GroupBatch{}};
  const std::int32_t t = 101;
  for (const bool binned : {true, false}) {
    sp.loop->set_lost_ranks(std::vector<char>{0, 0});
    sp.planner->set_binned_routing(binned);
    // Before the loss: per layer and expert, replica_share(T, 2, 0) = 51 pairs on GPU 0 and 50 on GPU 1
    // (rank_pairs sums two layers x two experts).
    const StepPlan before = sp.plan(batches, Time{});
    // (No rank lost: on the second pass, the whole placement back, as after a replacement.)
    for (int e = 0; e < 4; ++e) CHECK(sp.planner->placement().replicas(1)[static_cast<std::size_t>(e)] == 2);
    CHECK_FALSE(sp.planner->binned_routing());
    CHECK(sp.planner->rank_pairs()[0] == 2 * 2 * replica_share(t, 2, 0));
    CHECK(sp.planner->rank_pairs()[1] == 2 * 2 * replica_share(t, 2, 1));
    CHECK(sp.planner->expert_cost().time(1) > Duration::zero());
    CHECK(before.dispatch_nvlink_bytes > 0);  // GPU 0 sends tokens to GPU 1's copies
    sp.loop->set_lost_ranks(std::vector<char>{0, 1});
    const StepPlan& after = sp.plan(batches, Time{});
    // After: GPU 0's copies are the only ones: all 2 T pairs per layer; GPU 1 none, no expert time, and
    // no byte crosses NVLink (GPU 0 keeps its tokens; GPU 1 has none to send).
    CHECK(sp.planner->rank_pairs()[0] == 2 * 2 * t);
    CHECK(sp.planner->rank_pairs()[1] == 0);
    CHECK(sp.planner->expert_cost().time(1) == Duration::zero());
    CHECK(sp.planner->gpu_flops()[1] == 0);
    CHECK(after.part(StepPart::kExperts) > before.part(StepPart::kExperts));  // GPU 0 runs twice the pairs
    CHECK(after.dispatch_nvlink_bytes == 0);
    CHECK(after.dispatch_nic_bytes == 0);
    // Every expert is single after the loss: routing is binned where allowed (per-rank sums on the layer
    // not drawn expert by expert), exact otherwise; before it, four bins of copies outnumber what the
    // binned draw takes (ranks + replicated experts > experts), so both steps before drew every expert.
    CHECK(sp.planner->binned_routing() == binned);
    for (int e = 0; e < 4; ++e) CHECK(sp.planner->placement().replicas(1)[static_cast<std::size_t>(e)] == 1);
  }
}

TEST_CASE("All-to-All bytes match a hand count when every token touches every GPU") {
  // Top-4 of 4 experts on 2 GPUs: each token goes to both GPUs, so each GPU sends its T tokens once to
  // the other GPU in dispatch (FP8: 1 byte x hidden plus one scale byte per 32 channels) and receives them
  // back in combine (BF16: 2 bytes).
  ScenarioSpec s = two_gpu_spec();
  s.model.top_k = 4;
  s.precision.dispatch = Precision::kFP8;
  s.precision.combine = Precision::kBF16;
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity uniform(PopularitySpec{}, 1, 4, 4, Rng(1));
  StepPlanner planner(s, gpu, fabric, uniform, Rng(3));
  const auto batches = decode_batches(32);
  const StepPlan& p = planner.plan(batches, Time{});
  const double per_gpu_tokens = 32;
  const double expected = 2 /*GPUs*/ * per_gpu_tokens * 1024 * ((1.0 + 1.0 / 32) + 2.0);
  REQUIRE(p.dispatch_nvlink_bytes == Approx(expected));
  REQUIRE(p.dispatch_nic_bytes == 0.0);
  REQUIRE(p.part(StepPart::kDispatch) > Duration::zero());
  REQUIRE(p.part(StepPart::kCombine) >= p.part(StepPart::kDispatch));  // twice the bytes, never faster
}

TEST_CASE("an empty batch costs nothing") {
  const ScenarioSpec s = two_gpu_spec();
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity uniform(PopularitySpec{}, 1, 4, 2, Rng(1));
  StepPlanner planner(s, gpu, fabric, uniform, Rng(3));
  const std::vector<GroupBatch> empty(2);
  REQUIRE(planner.plan(empty, Time{}).total == Duration::zero());
}

TEST_CASE("binned routing costs steps as drawing every expert does, on average") {
  // DeepSeek-V3 on EP16 (58 MoE layers, Pareto popularity). Binned: 57 of 58 layers draw per-GPU sums of
  // their hot experts. Same batches, 300 plans each way: the means of the step, of its expert and
  // All-to-All parts and of the GPU imbalance agree to within their sampling noise plus rounding. Also with
  // EPLB's redundant slots: an expert with two copies is a bin of its own, its count split over them.
  const std::vector<std::string> eplb = {"experts.placement=\"eplb\"", "experts.redundant_slots_per_gpu=1"};
  for (const auto& sets : {std::vector<std::string>{}, eplb}) {
    INFO((sets.empty() ? "contiguous placement" : "EPLB, one redundant slot per GPU"));
    const LoadedScenario sc = load_scenario(
        std::string(MOESIM_SOURCE_DIR) + "/scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json", sets);
    const RooflineCostModel gpu(sc.spec.cluster.gpu);
    const RandomStreams streams(1);
    const ServingModels models(sc.spec, streams);
    auto binned = models.make_standalone(gpu, Rng(3));
    auto full = models.make_standalone(gpu, Rng(4));
    full->set_binned_routing(false);
    REQUIRE(binned->binned_routing());
    REQUIRE_FALSE(full->binned_routing());
    for (const std::int64_t seqs : {4, 64}) {
      std::vector<GroupBatch> batches(16);
      for (GroupBatch& b : batches) {
        b.decode_seqs = seqs;
        b.decode_context_tokens = static_cast<double>(seqs) * 1500;
        b.sampled_seqs = seqs;
      }
      batches[3].prefill_tokens = 2048;  // one group with a prefill chunk
      batches[3].prefill_pairs = 2048.0 * 1024;
      batches[3].prefill_kv_tokens = 2048;
      double sum[2][4] = {};
      const int plans = 300;
      for (int i = 0; i < plans; ++i) {
        int w = 0;
        for (StandalonePlanner* pl : {&binned, &full}) {
          const StepPlan& p = pl->plan(batches, Time{});
          sum[w][0] += p.total.seconds();
          sum[w][1] += p.part(StepPart::kExperts).seconds();
          sum[w][2] += (p.part(StepPart::kDispatch) + p.part(StepPart::kCombine)).seconds();
          sum[w][3] += p.gpu_imbalance;
          ++w;
        }
      }
      INFO(seqs << " sequences per group");
      CHECK(sum[0][0] == Approx(sum[1][0]).epsilon(0.01));
      CHECK(sum[0][1] == Approx(sum[1][1]).epsilon(0.02));
      CHECK(sum[0][2] == Approx(sum[1][2]).epsilon(0.02));
      CHECK(sum[0][3] == Approx(sum[1][3]).epsilon(0.02));
    }
  }
}

TEST_CASE("the replicas of a pool share one set of routing tables until one changes its own") {
  const LoadedScenario sc = load_scenario(
      std::string(MOESIM_SOURCE_DIR) + "/scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json", {});
  const RooflineCostModel gpu(sc.spec.cluster.gpu);
  const RandomStreams streams(1);
  const ServingModels models(sc.spec, streams);
  auto a = models.make_standalone(gpu, Rng(1));
  auto b = models.make_standalone(gpu, Rng(2));
  CHECK(a->routing_tables() == b->routing_tables());
  b->set_binned_routing(false);  // copy on write: b gets its own tables, a keeps the shared, binned ones
  CHECK(a->routing_tables() != b->routing_tables());
  CHECK(a->binned_routing());
  CHECK_FALSE(b->binned_routing());
  // With an experts-in-the-loop mechanism a planner changes its tables and keeps them to itself.
  const LoadedScenario loop =
      load_scenario(std::string(MOESIM_SOURCE_DIR) + "/scenarios/reference/deepseek_v3_2x8xh200_ep16_1h.json",
                    {"experts.rerouting.threshold=1.3"});
  const ServingModels loop_models(loop.spec, streams);
  auto c = loop_models.make_standalone(gpu, Rng(1));
  auto d = loop_models.make_standalone(gpu, Rng(2));
  CHECK(c->routing_tables() != d->routing_tables());
}
