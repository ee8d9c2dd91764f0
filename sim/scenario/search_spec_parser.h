// The SPEC of `moesim search`: what to serve (a catalog model, a workload, an SLA), on what (a GPU type,
// node counts) and which deployments to consider (the space). Strict like the scenario parser: unknown
// keys, wrong types and impossible values are InputErrors naming the SPEC's key. The workload, sla, run,
// experts and base deployment sections are scenario sections, copied into every candidate scenario and
// checked by the scenario parser under the same key names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/scenario/json_reader.h"

namespace moesim {

// A prefill/decode shape: `prefill` prefill instances and `decode` decode instances of equal size over the
// cluster ("2p1d"); prefill == 0 is the colocated deployment (one pool of role both).
struct PoolShape {
  int prefill = 0;
  int decode = 0;
  [[nodiscard]] bool colocated() const { return prefill == 0; }
  [[nodiscard]] std::string label() const;  // "colocated" or "<x>p<y>d"
  bool operator==(const PoolShape&) const = default;
};

// The axes of the search: every combination is one candidate deployment (illegal ones are pruned with the
// scenario parser's reason). Empty ep_sizes: every EP size that tiles the instance.
struct SearchSpace {
  std::vector<std::string> engines{"vllm"};
  std::vector<std::string> weights{"fp8"};
  std::vector<std::string> kv_cache{"bf16"};
  std::vector<PoolShape> pool_shapes{PoolShape{}};
  std::vector<int> ep_sizes;
  std::vector<int> attention_tp{1};
  std::vector<int> expert_tp{1};
  std::vector<int> pipeline_stages{1};
  std::vector<int> max_batch_size{64, 128, 256};
  std::vector<std::int64_t> max_batched_tokens{2048};  // token budget per step = prefill chunk
  std::vector<bool> two_batch_overlap{false};
  std::vector<bool> mtp{false};
  std::vector<int> redundant_experts{0};
};

// How the static front is verified by simulation (capacity at SLA per point).
struct VerifySettings {
  int max_points = 24;         // simulated points at most, over all rounds
  double margin = 0.15;        // optimism added to the best observed simulated/static ratio
  double capacity_tol = 0.05;  // capacity search bracket, share of the rate
  // Independent runs per capacity probe, first and at most (run --capacity: 4 and 8). The search narrows
  // only the capacity's lower end to capacity_tol: the upper end is the lowest rate it saw fail.
  int replications = 4;
  int max_replications = 4;
};

struct SearchSpec {
  std::string name;
  std::string description;
  Json model;   // a catalog name or a model object, as a scenario's "model"
  Json gpu;     // a catalog name or a GPU object, as a scenario's cluster.gpu
  Json fabric;  // null: the catalog default
  int gpus_per_node = 8;
  std::vector<int> nodes;  // node counts to consider, ascending
  Json workload;
  Json sla;
  Json run;
  Json experts;     // null or a scenario experts section (placement etc.)
  Json deployment;  // null or base deployment keys every candidate starts from (not the searched ones)
  SearchSpace space;
  VerifySettings verify;
  double target_tokens_per_s_per_user = 0;  // 0: recommend the best tokens/s per GPU
};

// Parses a SPEC; `origin` prefixes nothing (keys are named by their path in the SPEC).
SearchSpec parse_search_spec(const Json& j);
// Loads and parses a SPEC file (errors name the file for syntax, the key for content).
SearchSpec load_search_spec(const std::string& path);

}  // namespace moesim
