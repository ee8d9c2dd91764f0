// Single-batch overlap (deployment.single_batch_overlap): SGLang's combine beside the down GEMM and the
// shared experts (Blackwell), the shared experts beside the dispatch (Hopper).
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "hwmodels/roofline_cost_model.h"
#include "sim/engine/random.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/serving_models.h"
#include "sim/serving/step/step_planner.h"

using namespace moesim;

namespace {
// 4 GPUs on 2 nodes, 8 experts of which every token picks all 8 (2 per GPU) and one shared expert: every
// layer sees identical counts, so every MoE layer costs the same.
Json base(const std::string& gpu, const std::string& experts) {
  Json j = Json::parse(R"({
    "model": {"num_layers": 4, "hidden": 4096, "vocab": 1000, "attention": "gqa", "num_heads": 32,
              "num_kv_heads": 8, "head_dim": 128, "routed_experts": 8, "top_k": 8, "expert_inter": 1024,
              "shared_experts": 1, "shared_expert_inter": 2048},
    "cluster": {"nodes": 2, "gpus_per_node": 2},
    "deployment": {"ep_size": 4, "max_batched_tokens": 8192, "all_to_all": "low_latency"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                 "prompt_tokens": {"kind": "fixed", "tokens": 8}, "output_tokens": {"kind": "fixed", "tokens": 8}},
    "run": {"requests": 1}})");
  j["cluster"]["gpu"] = gpu;
  j["precision"] = Json{{"weights", "fp8"}, {"routed_experts", experts}, {"shared_experts", "fp8"}};
  return j;
}

constexpr std::int64_t kSeqs = 256;

StepPlan plan(const ScenarioSpec& s) {
  const RooflineCostModel gpu(s.cluster.gpu);
  const Fabric fabric(s.cluster.fabric);
  const ExpertPopularity pop(PopularitySpec{}, s.model.moe_layers(), 8, 8, Rng(1));
  StepPlanner planner(s, gpu, fabric, pop, Rng(2));
  GroupBatch b;
  b.decode_seqs = kSeqs;
  b.decode_context_tokens = static_cast<double>(kSeqs) * 512;
  b.sampled_seqs = kSeqs;
  return planner.plan(std::vector<GroupBatch>(4, b), Time{});
}

struct Pair {
  StepPlan off, on;
  GpuSpec gpu;
};

Pair plans(const std::string& gpu, const std::string& experts) {
  Json j = base(gpu, experts);
  const ScenarioSpec off = parse_scenario(j, "").spec;
  j["deployment"]["single_batch_overlap"] = true;
  const ScenarioSpec on = parse_scenario(j, "").spec;
  return Pair{.off = plan(off), .on = plan(on), .gpu = on.cluster.gpu};
}

// The shared expert of one layer for one group's batch: one SwiGLU FFN of 2,048 columns at FP8.
double shared_us(const GpuSpec& g) {
  const RooflineCostModel gpu(g);
  return gpu
      .expert_ffn(ExpertFfnWork{.tokens = kSeqs, .hidden = 4096, .inter = 2048, .weights = Precision::kFP8})
      .us();
}

double per_layer(const StepPlan& p, StepPart part) { return p.part(part).us() / 4.0; }
}  // namespace

TEST_CASE("signalled combine by hand: hidden behind a longer down GEMM but the last expert's send") {
  const auto us = [](double x) { return Duration::from_us(x); };
  // 32 of a B200's 148 SMs held: the down GEMM runs on 116, 300 x 148 / 116 = 382.76 us. The combine
  // (200 us, 6 experts) sends each expert's 33.3 us as the GEMM finishes it: only the last one is exposed.
  const SignalledCombine a = signalled_combine(us(300), us(200), 32.0 / 148.0, 6);
  CHECK(a.down.us() == Approx(300.0 * 148.0 / 116.0).epsilon(1e-6));
  CHECK(a.rest.us() == Approx(200.0 / 6.0).epsilon(1e-6));
  // A combine longer than the GEMM waits only for the first expert: it ends at 400 + 133.3 / 4 after the
  // GEMM's start (a quarter of the SMs held: 100 / 0.75 = 133.3 us).
  const SignalledCombine b = signalled_combine(us(100), us(400), 0.25, 4);
  CHECK(b.down.us() == Approx(100.0 / 0.75).epsilon(1e-6));
  CHECK((b.down + b.rest).us() == Approx(400.0 + 100.0 / 0.75 / 4.0).epsilon(1e-6));
  // No SMs held: the GEMM keeps its time.
  CHECK(signalled_combine(us(100), us(50), 0.0, 2).down == us(100));
}

TEST_CASE("Blackwell, NVFP4 experts: the combine beside the down GEMM and then the shared experts") {
  const Pair p = plans("b200", "fp4");
  const double h = 32.0 / 148.0;  // SGLang's combine-send SMs on Blackwell, of a B200's 148
  // Compute and dispatch are what they were; the shared experts left the attention side only in time.
  CHECK(p.on.part(StepPart::kAttention) == p.off.part(StepPart::kAttention));
  CHECK(p.on.part(StepPart::kExperts) == p.off.part(StepPart::kExperts));
  CHECK(p.on.part(StepPart::kDispatch) == p.off.part(StepPart::kDispatch));
  // One layer by hand: down GEMM D = a third of the experts, slowed to D / (1 - h); the combine C sends
  // each of the GPU's 2 experts as the GEMM finishes it; the shared experts S then run beside the rest of
  // the combine at (1 - h) of their speed.
  const double experts = per_layer(p.off, StepPart::kExperts);
  const double c = per_layer(p.off, StepPart::kCombine);
  const double s = shared_us(p.gpu);
  const double d = experts / 3.0, dd = d / (1.0 - h);
  const double rest = std::max(dd, c) + std::min(dd, c) / 2.0 - dd;
  const double stage = std::max(rest, s + rest * h);
  const double exposed = dd - d + stage - s;
  CHECK(per_layer(p.on, StepPart::kCombine) == Approx(exposed).epsilon(1e-6));
  CHECK((p.off.total - p.on.total).us() == Approx(4.0 * (c - exposed)).epsilon(1e-6));
  CHECK(p.on.comm_hidden.us() == Approx(4.0 * (c - std::min(c, exposed))).epsilon(1e-6));
  CHECK(p.on.comm_sm_contention.us() == Approx(4.0 * (dd - d + stage - std::max(rest, s))).epsilon(1e-6));
  // The parts still add up to the step, now shorter (here the combine, 0.22 ms across nodes, outlasts the
  // down GEMM and the shared experts: every compute beside it is hidden but its held SMs' share).
  CHECK(p.on.total == p.on.parts.sum());
  CHECK(p.on.total < p.off.total);
}

TEST_CASE(
    "Blackwell, FP8 experts (DeepGEMM, no signals): the combine after the down GEMM, beside the shared "
    "experts") {
  const Pair p = plans("b200", "fp8");
  const double h = 32.0 / 148.0;
  const double c = per_layer(p.off, StepPart::kCombine);
  const double s = shared_us(p.gpu);
  const double exposed = std::max(c, s + c * h) - s;
  CHECK(per_layer(p.on, StepPart::kCombine) == Approx(exposed).epsilon(1e-6));
  CHECK((p.off.total - p.on.total).us() == Approx(4.0 * (c - exposed)).epsilon(1e-6));
}

TEST_CASE("Hopper: the shared experts beside the dispatch in flight, the combine after the down GEMM") {
  // vLLM's kernels on an H100 (no DeepGEMM signals): only the dispatch overlaps, the low-latency kernels
  // holding every SM for 0.06 of their 0.17 ms (StepPlanner::comm_held_share).
  const Pair p = plans("h100-sxm", "fp8");
  const double h = 0.06 / 0.17;
  const double dispatch = per_layer(p.off, StepPart::kDispatch);
  const double s = shared_us(p.gpu);
  const double exposed = std::max(dispatch, s + dispatch * h) - s;
  CHECK(per_layer(p.on, StepPart::kDispatch) == Approx(exposed).epsilon(1e-6));
  CHECK(p.on.part(StepPart::kCombine) == p.off.part(StepPart::kCombine));
  CHECK((p.off.total - p.on.total).us() == Approx(4.0 * (dispatch - exposed)).epsilon(1e-6));
}

TEST_CASE("single_batch_overlap off is the plain schedule, and bad combinations name the key") {
  Json j = base("b200", "fp4");
  const StepPlan plain = plan(parse_scenario(j, "").spec);
  j["deployment"]["single_batch_overlap"] = false;
  const StepPlan off = plan(parse_scenario(j, "").spec);
  CHECK(off.total == plain.total);
  CHECK(off.comm_hidden == Duration::zero());
  const auto error_of = [](Json k) {
    try {
      (void)parse_scenario(k, "");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  j["deployment"]["single_batch_overlap"] = true;
  j["deployment"]["two_batch_overlap"] = true;
  CHECK_THAT(error_of(j), Catch::Contains("deployment.single_batch_overlap") && Catch::Contains("exclusive"));
  j["deployment"]["two_batch_overlap"] = false;
  j["deployment"]["all_to_all"] = "high_throughput";
  CHECK_THAT(error_of(j),
             Catch::Contains("deployment.single_batch_overlap") && Catch::Contains("low_latency"));
}
