// Shared by the serving tests: a toy MoE of two layers (GQA attention, 8 heads of 128, a 1,000-token
// vocabulary, experts 512 wide) with a chosen expert count, top-k and hidden size, and a short Poisson run
// of it on H100 nodes. Small enough that a test computes its bytes by hand and runs it in milliseconds.
#pragma once

#include <cstdint>
#include <string>

#include "sim/scenario/json_reader.h"

namespace moesim_test {

// The model block: two MoE layers of `experts` routed experts, top-`top_k`, over a hidden size `hidden`.
inline moesim::Json toy_moe(int experts, int top_k, int hidden = 1024) {
  return moesim::Json{{"num_layers", 2},     {"num_dense_layers", 0}, {"hidden", hidden},
                      {"vocab", 1000},       {"attention", "gqa"},    {"num_heads", 8},
                      {"num_kv_heads", 8},   {"head_dim", 128},       {"routed_experts", experts},
                      {"shared_experts", 0}, {"top_k", top_k},        {"expert_inter", 512}};
}

// A run of toy_moe in BF16 on `nodes` nodes of `gpus_per_node` H100s: one instance of EP `ep` with
// data-parallel attention (one GPU per group) and at most 16 sequences per group; Poisson arrivals at
// `rate_per_s` of fixed prompts and answers for `duration_s`.
struct ToyRun {
  std::string name = "toy";
  int experts = 32;
  int top_k = 2;
  int hidden = 1024;
  int nodes = 1;
  int gpus_per_node = 8;
  int ep = 8;
  double rate_per_s = 10;
  std::int64_t prompt = 512;
  std::int64_t output = 64;
  int seed = 11;
  double duration_s = 12;
};

inline moesim::Json toy_run(const ToyRun& t) {
  using moesim::Json;
  return Json{
      {"name", t.name},
      {"model", toy_moe(t.experts, t.top_k, t.hidden)},
      {"precision", {{"weights", "bf16"}, {"kv_cache", "bf16"}}},
      {"cluster", {{"gpu", "h100-sxm"}, {"nodes", t.nodes}, {"gpus_per_node", t.gpus_per_node}}},
      {"deployment", {{"ep_size", t.ep}, {"attention", {{"dp", t.ep}, {"tp", 1}}}, {"max_batch_size", 16}}},
      {"workload",
       {{"arrival", {{"kind", "poisson"}, {"rate_per_s", t.rate_per_s}}},
        {"prompt_tokens", {{"kind", "fixed"}, {"tokens", t.prompt}}},
        {"output_tokens", {{"kind", "fixed"}, {"tokens", t.output}}}}},
      {"run", {{"seed", t.seed}, {"duration_s", t.duration_s}}}};
}

}  // namespace moesim_test
