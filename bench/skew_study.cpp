// Per-batch skew of fixed steps (VALIDATION_CLUSTER.md "Per-batch skew"): plans `steps` identical steps of a
// scenario with the planner a run builds (its expert loop included, so EPLB places by the exact long-run
// popularity) and prints the imbalance ratio by rank, (max - mean) / mean routed pairs per GPU averaged over
// the MoE layers and steps (TensorRT-LLM's metric), the mean step and the input tokens per GPU per second.
//   skew_study SCENARIO STEPS DECODE_SEQS PROMPTS PROMPT_TOKENS [key=value ...]
// per attention group: DECODE_SEQS one-token decodes (context 2,000) or PROMPTS whole prompts of
// PROMPT_TOKENS tokens.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sim/scenario/profile_io.h"
#include "sim/scenario/scenario_parser.h"
#include "sim/serving/step/serving_models.h"

namespace {

moesim::GroupBatch group_batch(std::int64_t decode_seqs, std::int64_t prompts, std::int64_t prompt_tokens) {
  const double p = static_cast<double>(prompts);
  const double t = static_cast<double>(prompt_tokens);
  return moesim::GroupBatch{.decode_seqs = decode_seqs,
                            .decode_context_tokens = static_cast<double>(decode_seqs) * 2000.0,
                            .prefill_tokens = prompts * prompt_tokens,
                            .prefill_pairs = p * t * (t + 1) / 2,
                            .prefill_kv_tokens = p * t,
                            .sampled_seqs = decode_seqs + prompts,
                            .request_token_pairs = p * t * (t - 1)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: skew_study SCENARIO STEPS DECODE_SEQS PROMPTS PROMPT_TOKENS [key=value ...]\n");
    return 2;
  }
  const std::vector<std::string> sets(argv + 6, argv + argc);
  const moesim::ScenarioSpec s = moesim::load_scenario(argv[1], sets).spec;
  const int steps = std::atoi(argv[2]);
  const moesim::GroupBatch b = group_batch(std::atoll(argv[3]), std::atoll(argv[4]), std::atoll(argv[5]));
  const auto gpu = moesim::make_gpu_cost_model(s.cluster.gpu);
  const moesim::RandomStreams streams(s.run.seed);
  const moesim::ServingModels models(s, streams);
  moesim::StandalonePlanner planner = models.make_standalone(*gpu, streams.stream("plan-routing"));
  const std::vector<moesim::GroupBatch> groups(static_cast<std::size_t>(s.deployment.attention_dp), b);
  double imbalance = 0;
  double step_s = 0;
  double experts_s = 0;
  for (int i = 0; i < steps; ++i) {
    const moesim::StepPlan& p = planner.plan(groups, moesim::Time{});
    imbalance += (p.gpu_imbalance - 1.0) / steps;
    step_s += p.total.seconds() / steps;
    experts_s += p.part(moesim::StepPart::kExperts).seconds() / steps;
  }
  const double tokens_per_gpu =
      static_cast<double>(b.tokens()) * s.deployment.attention_dp / s.deployment.ep_size;
  std::printf("imbalance_by_rank %.4f step_ms %.2f experts_ms %.2f tokens_per_gpu_per_s %.0f\n", imbalance,
              step_s * 1e3, experts_s * 1e3, tokens_per_gpu / step_s);
  return 0;
}
