// The capacity review behind `moesim plan` (seed sections 1, 2, 3 and 8): memory from TOTAL parameters at
// each weight precision, fit and node count, KV cache against concurrency, throughput from ACTIVE
// parameters through the step planner and the GPU cost model, and the seed's topology advice. Pure
// arithmetic on a ScenarioSpec plus optional simulated measurements; no JSON, no CLI.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hwmodels/gpu_cost_model.h"
#include "sim/serving/report/report.h"
#include "sim/serving/spec/memory_plan.h"
#include "sim/serving/spec/scenario_spec.h"

namespace moesim {

struct PlanOptions {
  std::int64_t context_tokens = 0;  // 0: workload prompt mean + output mean (4096 for traces)
  std::int64_t concurrency = 0;     // concurrent sequences in the cluster; 0: max_batch_size x attention_dp
  std::vector<std::int64_t> kv_table_concurrency{1, 8, 32, 64, 128, 256, 512};
  std::vector<std::int64_t> decode_batch_sizes{1, 8, 32, 128, 512};  // sequences per attention group
  int steps_per_estimate = 4;  // planner steps averaged per throughput point (routing is sampled)
};

// One weight-precision option. "bf16", "fp8", "int8", "int4": every weight at that precision (the seed's
// arithmetic, total params x bytes). "scenario": each component at the scenario's own precision.
struct PrecisionRow {
  std::string label;
  double bytes_per_param = 0;       // weights / total params (mixed for "scenario")
  WeightBytes weights;              // whole model, by component (only routed_experts when shapes unknown)
  double weight_bytes = 0;          // whole model
  double weight_bytes_per_gpu = 0;  // over the scenario's cluster
  double kv_bytes = 0;              // context x concurrency, whole cluster
  double activation_overhead_bytes = 0;  // (activations + overhead) x GPUs of the scenario's cluster
  double total_bytes = 0;                // weights + KV + activations + overhead on the scenario's cluster
  double total_bytes_per_gpu = 0;
  bool fits_one_node_by_weights = false;  // weights <= gpus_per_node x HBM (raw capacity, the seed's test)
  int nodes_by_weights = 0;               // ceil(weights / (gpus_per_node x HBM))
  int nodes_needed = 0;                   // ceil((weights + KV) / usable memory per node)
  bool fits_scenario_cluster = false;     // nodes_needed <= cluster.nodes
  std::int64_t max_concurrency = 0;       // at the context length, on the scenario's cluster (0: no fit)
  std::int64_t max_concurrency_needed_nodes = 0;  // the same on nodes_needed nodes
};

struct KvRow {
  std::int64_t concurrency = 0;
  double kv_bytes = 0;          // whole cluster
  double kv_bytes_per_gpu = 0;  // spread over the scenario's cluster
  bool fits = false;            // with the scenario's weights on the scenario's cluster
};

struct ThroughputRow {
  std::string phase;                // "decode" or "prefill"
  std::string pool;                 // deployment.pools: the pool whose deployment is costed ("1 decode EP72")
  std::int64_t batch = 0;           // decode: sequences per attention group; prefill: tokens per group
  std::int64_t replica_tokens = 0;  // tokens per step over the replica
  double step_s = 0;
  double tokens_per_s_per_gpu = 0;
  double tokens_per_s_per_node = 0;
  double tokens_per_s_cluster = 0;  // all replicas of the scenario's cluster
  double ms_per_token = 0;          // decode: step time, the inter-token latency of every sequence
  double flops_per_byte = 0;        // arithmetic intensity, mean over the replica's GPUs
  double ridge_flops_per_byte = 0;  // the GPU's achievable compute / achievable bandwidth
  double compute_util = 0;          // achieved FLOP/s over the peak (MFU)
  double hbm_util = 0;              // achieved HBM bytes/s over the peak
  double all_to_all_share = 0;      // dispatch + combine over step time
  std::string regime;               // "memory-bound" or "compute-bound"
};

// Capacity at N-1: the request rate the deployment holds with every GPU up, with one GPU lost and with one
// node lost (capacity_plan_n1.cpp), from the throughput rows: per instance, the decode tokens/s at the
// largest costed batch within the SLA's TPOT (colocated: and within the sequences its KV pools hold at the
// context length) and the prefill tokens/s; a colocated instance serves
// 1 / (prompt / prefill rate + output / decode rate) requests per second (its GPUs alternate the phases),
// a prefill pool prefill rate / prompt, a decode pool decode rate / output; disaggregated, the deployment
// holds the smaller of its prefill and decode pools' sums. A lost GPU takes its attention rank (1 of
// attention_dp) away; when the instance's placement has a copy of each expert elsewhere for every GPU it
// could lose, the instance goes on with the other ranks; else it is down until it re-shards onto the rest
// (faults.recovery "reshard"), then serves with them. A lost node takes the instances inside it (down until
// the node is replaced) or, for an instance across nodes, the node's ranks, covered or re-sharded as above.
// The worst pool is the one to lose the GPU or node.
struct NMinusOne {
  bool computed = false;
  double prompt_tokens = 0;  // means the rates assume
  double output_tokens = 0;
  bool decode_within_tpot = true;  // false: no costed decode batch meets the SLA's TPOT (the smallest used)
  double all_up_req_per_s = 0;
  bool gpu_covered = false;               // redundant copies cover any one GPU of the instance
  double gpu_lost_req_per_s = 0;          // covered, or after the re-shard
  double gpu_lost_restart_req_per_s = 0;  // while the instance restarts (the same when covered)
  bool node_covered = false;
  double node_lost_req_per_s = 0;
  double node_lost_restart_req_per_s = 0;
  std::string assumption;
};

struct SimulatedBatch {
  int max_batch_size = 0;
  Report report;
};

struct SimulatedReview {
  Report report;  // the scenario as configured
  std::vector<SimulatedBatch> by_batch;
};

struct CapacityPlan {
  std::string scenario;
  std::string model;
  bool architecture_known = true;
  double total_params = 0;   // used for memory: from shapes, or the published total when unknown
  double active_params = 0;  // used for throughput talk: from shapes, or the published figure
  double shapes_total_params = 0;
  double shapes_active_params = 0;
  double published_total_params = 0;
  double published_active_params = 0;
  std::string attention;          // "MLA" or "GQA"
  double kv_bytes_per_token = 0;  // all layers, at the scenario's KV precision
  std::string kv_precision;

  std::string gpu;
  double hbm_bytes = 0;
  int nodes = 0;
  int gpus_per_node = 0;
  int gpus = 0;
  double node_hbm_bytes = 0;
  double usable_bytes_per_gpu = 0;  // HBM x kv_cache_memory_fraction - activations - overhead
  double activation_bytes = 0;
  double overhead_bytes = 0;
  double kv_cache_memory_fraction = 0;

  std::int64_t context_tokens = 0;
  std::string context_source;
  std::int64_t concurrency = 0;
  std::string concurrency_source;
  // Sequences of context_tokens the deployed KV pools hold: whole sequences per attention group x groups
  // (0 without a pool). What the deployment serves, beside the seed's whole-cluster arithmetic.
  std::int64_t deployed_concurrency = 0;
  int attention_groups = 0;

  std::vector<PrecisionRow> precisions;  // bf16, fp8, int8, int4, scenario
  MemoryPlan deployment_memory;          // per GPU, the deployment as configured (replicated parts included)
  std::vector<KvRow> kv_table;
  std::vector<ThroughputRow> throughput;
  double single_request_ms_per_token = 0;  // one sequence alone on the replica
  std::string cost_model;
  std::vector<std::string> advice;
  std::vector<std::string> notes;
  std::optional<SimulatedReview> simulated;
  // deployment.pools: every pool's own memory plan as deployed (the rest of the review covers one pool).
  struct PoolMemory {
    std::string role;
    int instances = 0;
    int ep_size = 0;
    int gpus = 0;
    MemoryPlan memory;
  };
  std::vector<PoolMemory> pools;
  NMinusOne n_minus_one;

  [[nodiscard]] const PrecisionRow& row(const std::string& label) const;
};

// Memory, fit and advice only (no cost model): instant.
CapacityPlan plan_capacity_memory(const ScenarioSpec& s, const PlanOptions& o);
// The same with the deployment's memory plan as deployed (deployed_memory_plan: per-expert precisions).
CapacityPlan plan_capacity_memory(const ScenarioSpec& s, const PlanOptions& o, const MemoryPlan& deployed);

// The whole review without simulation: memory plus throughput estimates from the step planner.
CapacityPlan plan_capacity(const ScenarioSpec& s, const GpuCostModel& gpu, const PlanOptions& o);
// The same with the memory of `reviewed` (a pool view of `s`, or `s`) and the throughput rows of every
// pool of `s`, each from its own deployment: decode rows and the one-request latency from the decode pools,
// the prefill row from the prefill pools (both from a `both` pool).
CapacityPlan plan_capacity(const ScenarioSpec& s, const ScenarioSpec& reviewed, const GpuCostModel& gpu,
                           const PlanOptions& o);

// Fills plan.n_minus_one from plan.throughput (NMinusOne says how).
void add_n_minus_one(CapacityPlan& plan, const ScenarioSpec& s, const GpuCostModel& gpu);

// Runs the scenario as configured and once per max_batch_size in `batch_sizes`; fills plan.simulated.
void add_simulation(CapacityPlan& plan, const ScenarioSpec& s, const GpuCostModel& gpu,
                    std::span<const int> batch_sizes);

// Weights of the whole model (not per GPU) by component at the given precisions.
WeightBytes model_weight_bytes(const ModelSpec& m, const PrecisionSpec& p);

// Every weight component at `p` (router included: the seed's "total params x bytes").
PrecisionSpec uniform_precision(Precision p, const PrecisionSpec& base);

}  // namespace moesim
