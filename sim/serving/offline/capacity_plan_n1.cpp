// Capacity at N-1 (capacity_plan.h NMinusOne): the request rate of the deployment with every GPU up, with
// one GPU lost and with one node lost, from the plan's throughput rows and the instances' placements.
#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "sim/serving/offline/capacity_plan.h"
#include "sim/serving/runtime/faults.h"
#include "sim/serving/step/serving_models.h"

namespace moesim {

namespace {

// One pool as the N-1 arithmetic sees it.
struct PoolRate {
  PoolRole role = PoolRole::kBoth;
  int instances = 0;
  double per_instance = 0;  // requests per second
  int ranks = 1;            // attention ranks per instance
  int gpus = 1;             // per instance
  bool gpu_covered = false;
  bool node_covered = false;
  int node_ranks_lost = 0;  // an instance across nodes: its ranks on one node (0: instances fit in a node)
  int node_instances_lost = 0;
};

double mean_prompt(const ScenarioSpec& s, bool prompt) {
  const auto& rows = s.workload.trace;
  if (rows.empty()) return std::max(1.0, mean_length(prompt ? s.workload.prompt : s.workload.output));
  double sum = 0;
  for (const RequestSpec& r : rows) sum += static_cast<double>(prompt ? r.prompt_tokens : r.output_tokens);
  return std::max(1.0, sum / static_cast<double>(rows.size()));
}

// Whether the placement keeps a copy of every expert when the instance's GPUs `lost` fail (GPU g is
// expert-parallel rank (g mod ep) / expert_tp).
bool covered(const Placement& p, const DeploymentSpec& d, std::span<const int> lost) {
  std::vector<char> ranks(static_cast<std::size_t>(p.gpus()), 0);
  for (const int g : lost) ranks[static_cast<std::size_t>((g % d.ep_size) / d.expert_tp) % ranks.size()] = 1;
  return experts_covered(p, ranks);
}

// The pool's coverage of any one GPU and of its first node's GPUs, from an instance's placement.
void coverage(PoolRate& r, const ScenarioSpec& view, const GpuCostModel& gpu, int per_node) {
  if (view.model.routed_experts == 0) return;
  const RandomStreams streams(view.run.seed);
  const ServingModels models(view, streams);
  const StandalonePlanner planner = models.make_standalone(gpu, streams.stream("plan-routing"));
  const Placement& p = planner->placement();
  const DeploymentSpec& d = view.deployment;
  r.gpu_covered = r.ranks > 1;
  for (int g = 0; g < r.gpus && r.gpu_covered; ++g) r.gpu_covered = covered(p, d, std::vector<int>{g});
  if (r.node_ranks_lost > 0 && r.node_ranks_lost < r.ranks) {
    std::vector<int> node(static_cast<std::size_t>(per_node));
    for (int g = 0; g < per_node; ++g) node[static_cast<std::size_t>(g)] = g;
    r.node_covered = covered(p, d, node);
  }
}

// The deployment's rate with each pool at `rates` (per pool, requests per second).
double deployment_rate(const std::vector<PoolRate>& pools, const std::vector<double>& rates) {
  double both = 0, prefill = 0, decode = 0;
  bool disaggregated = false;
  for (std::size_t i = 0; i < pools.size(); ++i) {
    if (pools[i].role == PoolRole::kBoth) both += rates[i];
    if (pools[i].role == PoolRole::kPrefill) prefill += rates[i];
    if (pools[i].role == PoolRole::kDecode) decode += rates[i];
    disaggregated = disaggregated || pools[i].role != PoolRole::kBoth;
  }
  return disaggregated ? std::min(prefill, decode) : both;
}

// The worst deployment rate over the pool that loses: pool i keeps `kept(pool)` requests per second.
template <class Kept>
double worst(const std::vector<PoolRate>& pools, Kept kept) {
  std::vector<double> rates;
  for (const PoolRate& p : pools) rates.push_back(p.instances * p.per_instance);
  double out = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < pools.size(); ++i) {
    std::vector<double> r = rates;
    r[i] = kept(pools[i]);
    out = std::min(out, deployment_rate(pools, r));
  }
  return out;
}

}  // namespace

void add_n_minus_one(CapacityPlan& plan, const ScenarioSpec& s, const GpuCostModel& gpu) {
  NMinusOne& n = plan.n_minus_one;
  n.prompt_tokens = mean_prompt(s, true);
  n.output_tokens = mean_prompt(s, false);
  const int per_node = s.cluster.gpus_per_node;
  const double tpot_ms = s.sla.tpot.seconds() * 1e3;
  std::vector<PoolRate> pools;
  const std::vector<PoolSpec> specs = s.pool_specs();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const PoolSpec& ps = specs[i];
    const std::string label = s.disaggregated() ? std::to_string(i) + " " + to_string(ps.role) + " EP" +
                                                      std::to_string(ps.deployment.ep_size)
                                                : "";
    const DeploymentSpec& d = ps.deployment;
    PoolRate r{
        .role = ps.role, .instances = ps.instances, .ranks = d.attention_dp, .gpus = d.gpus_per_instance()};
    // Per instance: the best decode row within the TPOT (else the smallest batch), and the prefill row.
    double decode = 0, smallest = 0, prefill = 0;
    bool within = false;
    for (const ThroughputRow& t : plan.throughput) {
      if (t.pool != label) continue;
      const double per_instance = t.tokens_per_s_per_gpu * r.gpus;
      if (t.phase == "prefill") prefill = per_instance;
      if (t.phase != "decode") continue;
      // A colocated deployment's decode batch is bounded by what its KV pools hold at the context length.
      if (!s.disaggregated() && plan.attention_groups > 0 &&
          t.batch > plan.deployed_concurrency / plan.attention_groups)
        continue;
      if (smallest == 0) smallest = per_instance;
      if (t.ms_per_token <= tpot_ms && per_instance > decode) {
        decode = per_instance;
        within = true;
      }
    }
    if (!within) decode = smallest;
    n.decode_within_tpot = n.decode_within_tpot && (within || ps.role == PoolRole::kPrefill);
    if (ps.role == PoolRole::kBoth && decode > 0 && prefill > 0)
      r.per_instance = 1.0 / (n.prompt_tokens / prefill + n.output_tokens / decode);
    if (ps.role == PoolRole::kPrefill) r.per_instance = prefill / n.prompt_tokens;
    if (ps.role == PoolRole::kDecode) r.per_instance = decode / n.output_tokens;
    if (r.gpus <= per_node) {
      r.node_instances_lost = std::min(ps.instances, std::max(1, per_node / r.gpus));
    } else {
      r.node_ranks_lost = std::max(1, per_node / std::max(1, d.attention_tp));
    }
    coverage(r, s.disaggregated() ? s.pool_view(ps) : s, gpu, per_node);
    pools.push_back(r);
  }
  if (pools.empty()) return;
  n.computed = true;
  n.all_up_req_per_s = worst(pools, [](const PoolRate& p) { return p.instances * p.per_instance; });
  n.gpu_covered = std::all_of(pools.begin(), pools.end(), [](const PoolRate& p) { return p.gpu_covered; });
  // One GPU: the instance keeps ranks - 1 of its ranks (covered, or re-sharded); 0 while it restarts.
  const auto one_rank_out = [](const PoolRate& p) {
    return (p.instances - 1) * p.per_instance + p.per_instance * (p.ranks - 1) / p.ranks;
  };
  n.gpu_lost_req_per_s = worst(pools, one_rank_out);
  n.gpu_lost_restart_req_per_s = worst(pools, [&](const PoolRate& p) {
    return p.gpu_covered ? one_rank_out(p) : (p.instances - 1) * p.per_instance;
  });
  // One node: the instances inside it are gone until it is replaced; an instance across nodes keeps the
  // ranks on its other nodes (covered, or after the re-shard).
  const auto node_after = [](const PoolRate& p) {
    if (p.node_ranks_lost == 0) return (p.instances - p.node_instances_lost) * p.per_instance;
    return (p.instances - 1) * p.per_instance + p.per_instance * (p.ranks - p.node_ranks_lost) / p.ranks;
  };
  n.node_covered = std::all_of(pools.begin(), pools.end(), [](const PoolRate& p) { return p.node_covered; });
  n.node_lost_req_per_s = worst(pools, node_after);
  n.node_lost_restart_req_per_s = worst(pools, [&](const PoolRate& p) {
    return p.node_ranks_lost > 0 && !p.node_covered ? (p.instances - 1) * p.per_instance : node_after(p);
  });
  n.assumption =
      "a lost GPU takes its attention rank (1 of attention_dp); redundant expert copies covering it keep the "
      "instance serving, else it is down until it re-shards onto its other GPUs; a lost node takes the "
      "instances inside it until it is replaced";
}

}  // namespace moesim
