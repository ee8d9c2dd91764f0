#include "sim/serving/offline/capacity_plan.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>

#include "hwmodels/fabric.h"
#include "sim/engine/check.h"
#include "sim/engine/random.h"
#include "sim/serving/runtime/serving_simulation.h"
#include "sim/serving/step/serving_models.h"
#include "sim/serving/step/step_planner.h"
#include "workloads/coactivation.h"
#include "workloads/expert_popularity.h"

namespace moesim {

namespace {

constexpr double kGB = 1e9;  // the seed sizes memory in decimal GB/TB (8 x 80 GB = 640 GB)

std::string gb(double bytes) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(bytes >= 100 * kGB ? 0 : 1);
  o << bytes / kGB << " GB";
  return o.str();
}

std::string precision_label(Precision p) { return std::string(to_string(p)); }

// KV bytes held in the cluster per cached token: MLA's latent is replicated on every GPU of a TP group;
// GQA shards KV heads over it (a head is never split, so ceil). Matches plan_memory's per-GPU pool.
double kv_replication(const ModelSpec& m, const DeploymentSpec& d) {
  if (d.attention_tp <= 1) return 1.0;
  if (m.attention == AttentionKind::kMla) return d.attention_tp;
  const int per_gpu = (m.num_kv_heads + d.attention_tp - 1) / d.attention_tp;
  return static_cast<double>(per_gpu * d.attention_tp) / m.num_kv_heads;
}

std::int64_t concurrency_that_fits(double pool_bytes, double kv_bytes_per_sequence) {
  if (pool_bytes <= 0 || kv_bytes_per_sequence <= 0) return 0;
  // Saturates: a cast of a double past int64 is undefined.
  return static_cast<std::int64_t>(std::min(std::floor(pool_bytes / kv_bytes_per_sequence), 9e18));
}

// ceil(x) as a node count, saturating at INT_MAX (x can be 1e12 for an absurd --context).
int node_count(double x) { return static_cast<int>(std::min(std::ceil(x), 2147483647.0)); }

PrecisionRow make_row(const CapacityPlan& plan, const ScenarioSpec& s, const std::string& label,
                      const PrecisionSpec& p, double kv_bytes_per_sequence) {
  const ModelSpec& m = s.model;
  PrecisionRow r;
  r.label = label;
  if (m.architecture_known) {
    r.weights = model_weight_bytes(m, p);
    r.weight_bytes = r.weights.total();
  } else {
    // Shapes are assumed: the published total at the weight precision is all the seed gives.
    r.weight_bytes = plan.total_params * bytes_per_element(p.routed_experts);
  }
  r.bytes_per_param = r.weight_bytes / plan.total_params;
  const double gpus = plan.gpus;
  r.weight_bytes_per_gpu = r.weight_bytes / gpus;
  r.kv_bytes = kv_bytes_per_sequence * static_cast<double>(plan.concurrency);
  r.activation_overhead_bytes = (plan.activation_bytes + plan.overhead_bytes) * gpus;
  r.total_bytes = r.weight_bytes + r.kv_bytes + r.activation_overhead_bytes;
  r.total_bytes_per_gpu = r.total_bytes / gpus;
  r.fits_one_node_by_weights = r.weight_bytes <= plan.node_hbm_bytes;
  r.nodes_by_weights = node_count(r.weight_bytes / plan.node_hbm_bytes);
  const double usable_node = plan.usable_bytes_per_gpu * plan.gpus_per_node;
  r.nodes_needed = usable_node > 0 ? std::max(1, node_count((r.weight_bytes + r.kv_bytes) / usable_node)) : 0;
  r.fits_scenario_cluster = r.nodes_needed > 0 && r.nodes_needed <= plan.nodes;
  r.max_concurrency = concurrency_that_fits(usable_node * plan.nodes - r.weight_bytes, kv_bytes_per_sequence);
  r.max_concurrency_needed_nodes =
      concurrency_that_fits(usable_node * r.nodes_needed - r.weight_bytes, kv_bytes_per_sequence);
  return r;
}

void add_memory_advice(CapacityPlan& plan, const ScenarioSpec& s) {
  const PrecisionRow& scen = plan.row("scenario");
  const std::string where = std::to_string(plan.gpus_per_node) + "x" + plan.gpu + " node";
  const double usable_node = plan.usable_bytes_per_gpu * plan.gpus_per_node;
  std::ostringstream o;
  if (scen.nodes_needed == 1) {
    o << "Single node, expert parallelism over NVLink: the weights as configured (" << gb(scen.weight_bytes)
      << ") plus the KV cache for " << plan.concurrency << " x " << plan.context_tokens << " tokens ("
      << gb(scen.kv_bytes) << ") fit the " << gb(usable_node) << " usable on one " << where
      << "; cross-node EP only pays when one node cannot hold the model (seed section 3).";
    plan.advice.push_back(o.str());
    if (plan.nodes > 1) {
      plan.advice.push_back("The scenario spans " + std::to_string(plan.nodes) +
                            " nodes but one holds the model: prefer independent single-node replicas (data "
                            "parallel) to cross-node EP unless one replica must be wider for throughput.");
    }
  } else {
    o << "The weights as configured (" << gb(scen.weight_bytes) << ") plus KV (" << gb(scen.kv_bytes)
      << ") exceed one " << where << " (" << gb(usable_node) << " usable, " << gb(plan.node_hbm_bytes)
      << " raw): "
      << (scen.nodes_needed > 0 ? std::to_string(scen.nodes_needed) : std::string("no number of"))
      << " nodes needed; go multi-node (EP inside each node over NVLink, cross-node EP over "
         "InfiniBand/RoCE or TP/PP across nodes) or quantise (seed sections 2-3).";
    plan.advice.push_back(o.str());
    for (const char* label : {"fp8", "int8", "int4"}) {
      const PrecisionRow& r = plan.row(label);
      if (r.nodes_needed != 1) continue;
      plan.advice.push_back(
          std::string("Quantising every weight to ") + label + " (" + gb(r.weight_bytes) +
          ") fits one node with room for " + std::to_string(r.max_concurrency_needed_nodes) +
          " sequences of " + std::to_string(plan.context_tokens) +
          " tokens; keep the router in BF16 and the hottest experts at the higher precision, "
          "and calibrate on the deployment's token mix (seed section 5).");
      break;
    }
    if (plan.row("int4").nodes_needed != 1) {
      plan.advice.push_back("No weight precision down to INT4 fits one " + where +
                            ": multi-node is required (" + std::to_string(plan.row("int4").nodes_needed) +
                            " nodes at INT4).");
    }
  }
  if (scen.nodes_needed > plan.nodes) {
    plan.advice.push_back("The scenario's cluster (" + std::to_string(plan.nodes) +
                          " node(s)) is smaller than the " + std::to_string(scen.nodes_needed) +
                          " nodes the configured precision needs.");
  }
  if (!plan.deployment_memory.fits() && scen.fits_scenario_cluster) {
    const WeightBytes& w = plan.deployment_memory.weights_per_gpu;
    plan.advice.push_back("As deployed (EP" + std::to_string(s.deployment.ep_size) + ", attention DP" +
                          std::to_string(s.deployment.attention_dp) + " x TP" +
                          std::to_string(s.deployment.attention_tp) + ") each GPU holds " + gb(w.total()) +
                          " of weights (attention, dense and shared parts replicated per "
                          "attention group: " +
                          gb(w.total() - w.routed_experts) +
                          ") and the KV pool is empty: raise attention TP, "
                          "widen EP, or lower precision.");
  }
  if (scen.nodes_needed > 1 || plan.nodes > 1) {
    plan.advice.push_back(
        "If the replica spans nodes, expect a larger All-to-All share than the 8-15% DeepSeek-V3 spends on "
        "one "
        "NVLink node; keep it under the 20% target (over 25% means imbalance or too small a "
        "batch); measure with --simulate.");
  }
}

// One throughput point: `groups` costed `steps` times (routing is sampled), averaged.
// `clock` is the planner's time: each costed step starts where the last one ended, as in a run (expert
// loads and prefetches are queued in time order).
ThroughputRow estimate(StandalonePlanner& planner, Time& clock, const CapacityPlan& plan,
                       const ScenarioSpec& s, std::span<const GroupBatch> groups, int steps) {
  ThroughputRow t;
  double total_s = 0;
  double a2a_s = 0;
  double flops = 0;
  double bytes = 0;
  for (int i = 0; i < steps; ++i) {
    const StepPlan& sp = planner.plan(groups, clock);
    clock += sp.total;
    total_s += sp.total.seconds();
    a2a_s += (sp.part(StepPart::kDispatch) + sp.part(StepPart::kCombine)).seconds();
    for (const double f : planner->gpu_flops()) flops += f;
    for (const double b : planner->gpu_bytes()) bytes += b;
    t.replica_tokens = sp.tokens;
  }
  const GpuSpec& g = s.cluster.gpu;
  const double gpus = planner->gpus();
  const double step = total_s / steps;
  const double peak = g.peak_flops(s.precision.routed_experts);
  t.step_s = step;
  t.tokens_per_s_per_gpu = step > 0 ? static_cast<double>(t.replica_tokens) / step / gpus : 0;
  t.tokens_per_s_per_node = t.tokens_per_s_per_gpu * plan.gpus_per_node;
  t.tokens_per_s_cluster = t.tokens_per_s_per_gpu * gpus * s.replicas();
  t.ms_per_token = step * 1e3;
  t.flops_per_byte = bytes > 0 ? flops / bytes : 0;
  t.ridge_flops_per_byte = peak * g.compute_efficiency / (g.hbm_bytes_per_s * g.mem_efficiency);
  t.compute_util = step > 0 ? flops / steps / gpus / step / peak : 0;
  t.hbm_util = step > 0 ? bytes / steps / gpus / step / g.hbm_bytes_per_s : 0;
  t.all_to_all_share = total_s > 0 ? a2a_s / total_s : 0;
  t.regime = t.flops_per_byte < t.ridge_flops_per_byte ? "memory-bound" : "compute-bound";
  return t;
}

// What one deployment's rows cover: the decode rows, the prefill row, the one-request latency.
struct RowSet {
  bool decode = true;
  bool prefill = true;
  bool single = true;
  std::string pool;
};

// The decode batches a review costs: the ladder's sizes the deployment can form (at most max_batch_size
// sequences per attention group), then the cap itself, the batch a saturated group runs at.
std::vector<std::int64_t> decode_batches(std::span<const std::int64_t> ladder, std::int64_t cap) {
  std::vector<std::int64_t> out;
  for (const std::int64_t b : ladder) {
    if (b > 0 && b < cap) out.push_back(b);
  }
  if (!ladder.empty() && cap > 0) out.push_back(cap);
  return out;
}

void add_rows(CapacityPlan& plan, const ScenarioSpec& s, const GpuCostModel& gpu, const PlanOptions& o,
              const RowSet& rows) {
  const RandomStreams streams(s.run.seed);
  ServingModels models(s, streams);
  StandalonePlanner planner = models.make_standalone(gpu, streams.stream("plan-routing"));
  Time clock;
  const auto dp = static_cast<std::size_t>(s.deployment.attention_dp);
  const double ctx = static_cast<double>(plan.context_tokens);
  const int steps = std::max(1, o.steps_per_estimate);
  std::vector<GroupBatch> groups(dp);
  const auto add = [&](const char* phase, std::int64_t batch) {
    ThroughputRow t = estimate(planner, clock, plan, s, groups, steps);
    t.phase = phase;
    t.pool = rows.pool;
    t.batch = batch;
    plan.throughput.push_back(t);
  };
  for (const std::int64_t b : decode_batches(o.decode_batch_sizes, s.deployment.max_batch_size)) {
    if (!rows.decode) break;
    std::fill(
        groups.begin(), groups.end(),
        GroupBatch{
            .decode_seqs = b, .decode_context_tokens = static_cast<double>(b) * ctx, .sampled_seqs = b});
    add("decode", b);
  }
  if (rows.prefill) {
    // Prefill: each group fills a step of max_batched_tokens with whole prompts (one chunk when longer).
    const std::int64_t chunk = s.deployment.max_batched_tokens;
    const double prompt =
        s.workload.trace.empty() ? std::max(1.0, std::round(mean_length(s.workload.prompt))) : ctx;
    const double p = std::min(prompt, static_cast<double>(chunk));
    const double n = static_cast<double>(chunk) / p;
    std::fill(groups.begin(), groups.end(),
              GroupBatch{.prefill_tokens = chunk,
                         .prefill_pairs = n * p * (p + 1) / 2,
                         .prefill_kv_tokens = n * p,
                         .sampled_seqs = std::max<std::int64_t>(1, static_cast<std::int64_t>(n)),
                         .request_token_pairs = n * p * (p - 1)});
    add("prefill", chunk);
  }
  if (rows.single) {
    // One request alone on the replica: the per-token latency floor (seed: 50-80 ms on 8xH100).
    std::fill(groups.begin(), groups.end(), GroupBatch{});
    groups[0] = GroupBatch{.decode_seqs = 1, .decode_context_tokens = ctx, .sampled_seqs = 1};
    plan.single_request_ms_per_token = estimate(planner, clock, plan, s, groups, steps).ms_per_token;
  }
}

// Without pools one deployment gives every row; with pools each pool its phases' rows (the first decode
// pool the one-request latency).
void add_throughput(CapacityPlan& plan, const ScenarioSpec& s, const GpuCostModel& gpu,
                    const PlanOptions& o) {
  if (!s.disaggregated()) {
    add_rows(plan, s, gpu, o, RowSet{});
  } else {
    bool single = true;
    for (std::size_t i = 0; i < s.pools.size(); ++i) {
      const PoolSpec& ps = s.pools[i];
      const ScenarioSpec view = s.pool_view(ps);
      const bool decode = ps.role != PoolRole::kPrefill;
      add_rows(plan, view, gpu, o,
               RowSet{.decode = decode,
                      .prefill = ps.role != PoolRole::kDecode,
                      .single = decode && single,
                      .pool = std::to_string(i) + " " + to_string(ps.role) + " EP" +
                              std::to_string(ps.deployment.ep_size)});
      single = single && !decode;
    }
  }
  plan.cost_model = gpu.source();

  // The largest memory-bound decode row (of any decode pool), quoted with its own utilisation and pool.
  const ThroughputRow* widest = nullptr;
  for (const ThroughputRow& t : plan.throughput) {
    if (t.phase == "decode" && t.regime == "memory-bound" && (widest == nullptr || t.batch > widest->batch))
      widest = &t;
  }
  if (widest != nullptr) {
    std::ostringstream a;
    a.setf(std::ios::fixed);
    a.precision(1);
    a << "Decode" << (widest->pool.empty() ? "" : " (pool " + widest->pool + ")")
      << " is memory-bound up to batch " << widest->batch << " per attention group (tensor cores at "
      << 100.0 * widest->compute_util
      << "%): raise concurrency toward the KV limit; concurrent requests share "
      << "expert weights, so the cost per token falls with batch (seed section 1).";
    plan.advice.push_back(a.str());
  }
}

}  // namespace

const PrecisionRow& CapacityPlan::row(const std::string& label) const {
  const auto it = std::find_if(precisions.begin(), precisions.end(),
                               [&](const PrecisionRow& r) { return r.label == label; });
  MOESIM_CHECK(it != precisions.end(), "no precision row " + label);
  return *it;
}

WeightBytes model_weight_bytes(const ModelSpec& m, const PrecisionSpec& p) {
  WeightBytes w;
  w.attention = m.attention_params_per_layer() * m.num_layers * bytes_per_element(p.attention);
  w.dense_ffn = m.dense_ffn_params() * m.num_dense_layers * bytes_per_element(p.dense_ffn);
  w.shared_experts = m.shared_expert_params() * m.moe_layers() * bytes_per_element(p.shared_experts);
  w.router = m.router_params() * m.moe_layers() * bytes_per_element(p.router);
  w.embeddings = m.embedding_params() * bytes_per_element(p.embeddings);
  w.routed_experts = m.routed_params_total() * bytes_per_element(p.routed_experts);
  return w;
}

PrecisionSpec uniform_precision(Precision p, const PrecisionSpec& base) {
  PrecisionSpec out = base;
  out.routed_experts = out.shared_experts = out.attention = out.dense_ffn = out.router = out.embeddings = p;
  return out;
}

CapacityPlan plan_capacity_memory(const ScenarioSpec& s, const PlanOptions& o) {
  return plan_capacity_memory(s, o, plan_memory(s));
}

CapacityPlan plan_capacity_memory(const ScenarioSpec& s, const PlanOptions& o, const MemoryPlan& deployed) {
  const ModelSpec& m = s.model;
  const DeploymentSpec& d = s.deployment;
  CapacityPlan plan;
  plan.scenario = s.name;
  plan.model = m.name;
  plan.architecture_known = m.architecture_known;
  plan.shapes_total_params = m.total_params();
  plan.shapes_active_params = m.active_params();
  plan.published_total_params = m.published_total_params_b * 1e9;
  plan.published_active_params = m.published_active_params_b * 1e9;
  const bool published = !m.architecture_known && plan.published_total_params > 0;
  plan.total_params = published ? plan.published_total_params : plan.shapes_total_params;
  plan.active_params = !m.architecture_known && plan.published_active_params > 0
                           ? plan.published_active_params
                           : plan.shapes_active_params;
  plan.attention = m.attention == AttentionKind::kMla ? "MLA" : "GQA";
  plan.kv_precision = precision_label(s.precision.kv_cache);
  plan.kv_bytes_per_token = m.kv_bytes_per_token(s.precision.kv_cache);

  plan.gpu = s.cluster.gpu.name;
  plan.hbm_bytes = s.cluster.gpu.hbm_bytes;
  plan.nodes = s.cluster.nodes;
  plan.gpus_per_node = s.cluster.gpus_per_node;
  plan.gpus = s.cluster.total_gpus();
  plan.node_hbm_bytes = plan.hbm_bytes * plan.gpus_per_node;
  plan.activation_bytes = d.activation_bytes;
  plan.overhead_bytes = d.framework_overhead_bytes;
  plan.kv_cache_memory_fraction = d.kv_cache_memory_fraction;
  plan.usable_bytes_per_gpu =
      plan.hbm_bytes * d.kv_cache_memory_fraction - d.activation_bytes - d.framework_overhead_bytes;

  if (o.context_tokens > 0) {
    plan.context_tokens = o.context_tokens;
    plan.context_source = "--context";
  } else if (s.workload.trace.empty()) {
    plan.context_tokens = std::max<std::int64_t>(
        1, std::llround(mean_length(s.workload.prompt) + mean_length(s.workload.output)));
    plan.context_source = "workload prompt mean + output mean";
  } else {
    plan.context_tokens = 4096;
    plan.context_source = "default for trace workloads";
  }
  if (o.concurrency > 0) {
    plan.concurrency = o.concurrency;
    plan.concurrency_source = "--concurrency";
  } else {
    plan.concurrency = static_cast<std::int64_t>(d.max_batch_size) * d.attention_dp * s.replicas();
    plan.concurrency_source = "deployment.max_batch_size x attention groups (" +
                              std::to_string(d.attention_dp * s.replicas()) + ")";
  }

  const double kv_per_sequence =
      plan.kv_bytes_per_token * kv_replication(m, d) * static_cast<double>(plan.context_tokens);
  for (const Precision p : {Precision::kBF16, Precision::kFP8, Precision::kINT8, Precision::kINT4}) {
    plan.precisions.push_back(
        make_row(plan, s, precision_label(p), uniform_precision(p, s.precision), kv_per_sequence));
  }
  plan.precisions.push_back(make_row(plan, s, "scenario", s.precision, kv_per_sequence));
  plan.deployment_memory = deployed;
  plan.attention_groups = d.attention_dp * s.replicas();
  if (plan.context_tokens > 0 && deployed.kv_tokens_per_group > 0)
    plan.deployed_concurrency = deployed.kv_tokens_per_group / plan.context_tokens * plan.attention_groups;

  const PrecisionRow& scen = plan.row("scenario");
  std::vector<std::int64_t> table = o.kv_table_concurrency;
  if (std::find(table.begin(), table.end(), plan.concurrency) == table.end())
    table.push_back(plan.concurrency);
  std::sort(table.begin(), table.end());
  for (const std::int64_t c : table) {
    const double kv = kv_per_sequence * static_cast<double>(c);
    plan.kv_table.push_back(KvRow{.concurrency = c,
                                  .kv_bytes = kv,
                                  .kv_bytes_per_gpu = kv / plan.gpus,
                                  .fits = c <= scen.max_concurrency});
  }

  if (!m.architecture_known) {
    plan.notes.push_back("The architecture of " + m.name +
                         " is not public: memory uses the published totals; the KV-cache and throughput "
                         "figures rest on the ASSUMED shapes in scenarios/catalog/models.json.");
  }
  plan.notes.push_back(
      "Memory in decimal GB (1e9 bytes), as the seed counts it. Usable per GPU = HBM x " +
      std::to_string(d.kv_cache_memory_fraction).substr(0, 4) +
      " (deployment.kv_cache_memory_fraction) - activations - framework overhead "
      "(deployment.activation_gib, framework_overhead_gib; defaults 4 and 2 GiB, a vLLM-style "
      "allowance for the activation workspace, CUDA graphs and the allocator).");
  plan.notes.push_back(
      "Fit, node counts and max concurrency use the seed's arithmetic (every weight held once "
      "across the cluster); the 'as deployed' figures add what the deployment replicates per "
      "attention group (attention, dense and shared parts, embeddings).");
  add_memory_advice(plan, s);
  return plan;
}

CapacityPlan plan_capacity(const ScenarioSpec& s, const GpuCostModel& gpu, const PlanOptions& o) {
  return plan_capacity(s, s, gpu, o);
}

CapacityPlan plan_capacity(const ScenarioSpec& s, const ScenarioSpec& reviewed, const GpuCostModel& gpu,
                           const PlanOptions& o) {
  // As deployed: under quantisation each expert at its tier's precision, the plan run and validate decide
  // "fits" from.
  CapacityPlan plan = plan_capacity_memory(reviewed, o, deployed_memory_plan(reviewed, gpu));
  add_throughput(plan, s, gpu, o);
  add_n_minus_one(plan, s, gpu);
  return plan;
}

void add_simulation(CapacityPlan& plan, const ScenarioSpec& s, const GpuCostModel& gpu,
                    std::span<const int> batch_sizes) {
  SimulatedReview review{.report = simulate(s, gpu), .by_batch = {}};
  for (const int b : batch_sizes) {
    ScenarioSpec copy = s;
    copy.deployment.max_batch_size = b;
    review.by_batch.push_back(SimulatedBatch{.max_batch_size = b, .report = simulate(copy, gpu)});
  }
  plan.simulated = std::move(review);
}

}  // namespace moesim
