// Published Blackwell serving figures against the step planner (VALIDATION_CLUSTER.md, "Blackwell and H20"):
// the decode step of a saturated pool at a fixed batch per GPU, with the GPU profile derived from the
// catalog's measured figures and, for comparison, from datasheet ratios alone (the profile before them).
#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "sim/engine/random.h"
#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/step/serving_models.h"
#include "sim/serving/step/step_breakdown.h"
#include "sim/serving/step/step_planner.h"
#include "workloads/skew_calibration.h"

using namespace moesim;

namespace {

// Mean of 8 planned decode steps (total and parts), each attention group holding `seqs` sequences of
// `context` tokens. `measured`: the catalog's measured figures of the GPU; else they are dropped (datasheet
// ratios only).
struct MeanStep {
  double total_s = 0;
  std::array<double, kStepParts> parts_s{};
  double gpu_imbalance = 0;  // mean over the steps of StepPlan::gpu_imbalance
};

MeanStep decode_step(const std::string& scenario, const std::vector<std::string>& set, std::int64_t seqs,
                     double context, bool measured) {
  LoadedScenario sc = load_scenario(std::string(MOESIM_SOURCE_DIR) + "/" + scenario, set);
  if (!measured) sc.spec.cluster.gpu.measured = GpuMeasured{};
  const auto gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
  const RandomStreams streams(sc.spec.run.seed);
  const ServingModels models(sc.spec, streams);
  auto planner = models.make_standalone(*gpu, streams.stream("plan-routing"));
  GroupBatch b;
  b.decode_seqs = seqs;
  b.decode_context_tokens = static_cast<double>(seqs) * context;
  b.sampled_seqs = seqs;
  const std::vector<GroupBatch> groups(static_cast<std::size_t>(sc.spec.deployment.attention_dp), b);
  Time clock;
  MeanStep m;
  constexpr int kSteps = 8;
  for (int i = 0; i < kSteps; ++i) {
    const StepPlan& p = planner.plan(groups, clock);
    clock += p.total;
    m.total_s += p.total.seconds() / kSteps;
    m.gpu_imbalance += p.gpu_imbalance / kSteps;
    for (std::size_t k = 0; k < kStepParts; ++k) m.parts_s[k] += p.parts.d[k].seconds() / kSteps;
  }
  return m;
}

struct Case {
  const char* label;
  std::vector<std::string> set;
};

}  // namespace

// The table of VALIDATION_CLUSTER.md "Blackwell and H20" (run: build/tests/test_serving
// "[.blackwell-table]"). SGLang on GB200 NVL72 (lmsys.org 2025-06-16 and 2025-09-25): DeepSeek-V3 decode on
// 48 GPUs, EP48, 2,000-token prompts; output tokens per second per GPU = sequences per GPU / step.
TEST_CASE("GB200 NVL72 decode against SGLang's published figures", "[.blackwell-table]") {
  const std::string gb200 = "docs/validation/dsv3_decode_gb200_nvl72_ep48.json";
  const std::vector<Case> cases{
      {"FP8 experts, BF16 KV, FP8 dispatch", {}},
      {"FP8 experts, two-batch overlap off", {"deployment.two_batch_overlap=false"}},
      {"NVFP4 experts, FP8 KV, NVFP4 dispatch",
       {"precision.routed_experts=\"fp4\"", "precision.kv_cache=\"fp8\"", "precision.dispatch=\"fp4\""}},
  };
  std::printf(
      "| case | seqs per GPU | step ms (ratios) | tok/s/GPU (ratios) | step ms (measured) | tok/s/GPU "
      "(measured) | measured: attention / small kernels / dispatch / experts / combine ms |\n"
      "|---|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    for (const std::int64_t seqs : {128, 256, 512}) {
      const double before = decode_step(gb200, c.set, seqs, 2050, false).total_s;
      const MeanStep after = decode_step(gb200, c.set, seqs, 2050, true);
      auto ms = [&](StepPart p) { return after.parts_s[static_cast<std::size_t>(p)] * 1e3; };
      std::printf("| %s | %lld | %.2f | %.0f | %.2f | %.0f | %.1f / %.1f / %.1f / %.1f / %.1f |\n", c.label,
                  static_cast<long long>(seqs), before * 1e3, static_cast<double>(seqs) / before,
                  after.total_s * 1e3, static_cast<double>(seqs) / after.total_s, ms(StepPart::kAttention),
                  ms(StepPart::kLayerKernels), ms(StepPart::kDispatch), ms(StepPart::kExperts),
                  ms(StepPart::kCombine));
    }
  }
}

namespace {
// Output tokens per second per GPU of a closed-loop run of `scenario` (one node of 8 GPUs).
double per_gpu_output(const std::string& scenario, const std::vector<std::string>& set) {
  const LoadedScenario sc = load_scenario(std::string(MOESIM_SOURCE_DIR) + "/" + scenario, set);
  const auto gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
  return simulate(sc.spec, *gpu).output_tokens_per_s / 8.0;
}
}  // namespace

// TensorRT-LLM's max-throughput DeepSeek-R1 rows (docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_
// TensorRT-LLM.md, docs/validation/blackwell_sources.md S3), held out from every cost: H200 (the GPU the
// profile was fitted on) 1436.2 tokens/s per GPU, B200 FP4 with 16-bit KV 4548.0, with FP8 KV 5393.3.
// The bands: most published cluster figures within 15%, none beyond 1.5x. All three are held to
// 15%, the B200 rows as the H200 control, each with the routing its recipe runs (no moe_config.load_balancer:
// DeepSeek-R1's own skew, VALIDATION_CLUSTER.md "Routing skew without a load balancer").
// TensorRT-LLM launches its trtllm-gen kernel for MLA decode on SM100, but its rate measured in SGLang's run
// takes the FP8 row beyond 1.5x (VALIDATION_CLUSTER.md, "The FP8 MLA decode kernel"): the trtllm profile
// keeps the decode fit (docs/engines.md), and the kernel's own rate, chosen explicitly, only makes the row
// faster.
TEST_CASE("TensorRT-LLM's DeepSeek-R1 max-throughput rows: H200 and B200 within 15%") {
  const double h200 = per_gpu_output("docs/validation/dsr1_fp8_8xh200_trtllm_maxtput.json", {});
  CHECK(h200 / 1436.2 == Approx(1.0).margin(0.15));
  // Hopper has no trtllm-gen cubins and no figure: TensorRT-LLM's choice costs exactly the fit.
  CHECK(
      per_gpu_output("docs/validation/dsr1_fp8_8xh200_trtllm_maxtput.json",
                     {"precision.kv_cache=\"fp8\"", "deployment.decode_attention_kernel=\"fitted\""}) ==
      per_gpu_output("docs/validation/dsr1_fp8_8xh200_trtllm_maxtput.json", {"precision.kv_cache=\"fp8\""}));
  const std::string b200 = "docs/validation/dsr1_fp4_8xb200_trtllm_maxtput.json";
  CHECK(per_gpu_output(b200, {}) / 4548.0 == Approx(1.0).margin(0.15));
  const std::vector<std::string> fp8{"precision.kv_cache=\"fp8\"", "deployment.max_batch_size=896",
                                     "deployment.max_batched_tokens=2048", "workload.arrival.users=7168"};
  const double fp8_kv = per_gpu_output(b200, fp8) / 5393.3;
  CHECK(fp8_kv == Approx(1.0).margin(0.15));
  std::vector<std::string> trtllm_gen = fp8;
  trtllm_gen.emplace_back("deployment.decode_attention_kernel=\"trtllm_gen\"");
  CHECK(per_gpu_output(b200, trtllm_gen) / 5393.3 > fp8_kv);
}

// NVIDIA's MLPerf configs run no expert load balancer (moe_backend WIDEEP, no moe_load_balancer), so the
// scenario routes by DeepSeek-R1's own skew: the Zipf law fitted to TensorRT-LLM's measured imbalance by rank
// without EPLB, (max - mean) / mean 1.564 at EP32 and 4,096 tokens (COMPONENT_FIGURES.md section 4). At EP8,
// 32 experts a GPU, the busiest GPU of a layer must carry what the calibration's own Monte-Carlo gives that
// law for 8 ranks at the step's tokens, and the step must cost more than under uniform routing. The batch is
// NVIDIA's: 135 sequences per rank (its GB200 log by Little's law), which its CUDA graphs pad to 256 (the
// config's captured sizes; the planner runs a step of 135 eager, bound by the host's kernel launches), with
// contexts of the prompt's mean 800 plus half the mean output of 3,498 tokens.
TEST_CASE("without a load balancer the MLPerf GB200 decode step carries the calibrated skew at EP8") {
  const std::string file = "docs/validation/mlperf_dsr1_fp4_gb200_nvl72_server.json";
  const LoadedScenario sc = load_scenario(std::string(MOESIM_SOURCE_DIR) + "/" + file, {});
  REQUIRE(sc.spec.workload.popularity.kind == PopularitySpec::Kind::kZipf);
  constexpr std::int64_t kSeqs = 256;
  constexpr double kContext = 800 + 3498 / 2.0;
  const MeanStep skewed = decode_step(file, {}, kSeqs, kContext, true);
  const SkewSetting ep8{
      .experts = 256, .top_k = 8, .tokens = 8 * kSeqs, .ranks = 8, .iterations = 400, .seed = 7};
  const double expected = 1 + expected_imbalance_ratio(sc.spec.workload.popularity.zipf_exponent, ep8);
  // 8 steps over 58 layers, each layer its own hot experts: the mean's sampling error is about 1.5%.
  CHECK(skewed.gpu_imbalance == Approx(expected).epsilon(0.05));
  const MeanStep uniform =
      decode_step(file, {"workload.expert_popularity={\"kind\":\"uniform\"}"}, kSeqs, kContext, true);
  CHECK(uniform.gpu_imbalance < skewed.gpu_imbalance);
  CHECK(uniform.total_s < skewed.total_s);
}

// A DeepSeek-V3 MoE layer at EP8 (32 local experts, top-8 of 256, so as many routed pairs per GPU as
// tokens) on a B300 (GB300's GPU), measured by FlashInfer's benchmark (docs/validation/blackwell_sources.md
// G1), against the grouped launch the gb300 profile costs (B200's measured efficiencies of its own peaks).
TEST_CASE("GB300 grouped NVFP4 experts against FlashInfer's B300 MoE benchmark", "[.blackwell-table]") {
  const LoadedScenario sc =
      load_scenario(std::string(MOESIM_SOURCE_DIR) + "/scenarios/default.json", {"cluster.gpu=\"gb300\""});
  const auto gpu = make_gpu_cost_model(sc.spec.cluster.gpu);
  std::printf("| tokens | ours FP4 ms | ours FP8 ms | ours BF16 ms |\n|---|---|---|---|\n");
  for (const std::int64_t tokens : {256, 512, 1024, 2048, 4096}) {
    auto ms = [&](Precision q) {
      const GroupedExpertsWork w{
          .experts = 32, .tokens = tokens, .hidden = 7168, .inter = 2048, .weights = q};
      return gpu->grouped_experts(w).seconds() * 1e3;
    };
    std::printf("| %lld | %.3f | %.3f | %.3f |\n", static_cast<long long>(tokens), ms(Precision::kFP4),
                ms(Precision::kFP8), ms(Precision::kBF16));
  }
}
