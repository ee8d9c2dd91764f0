// The typed scenario: everything one simulation needs, in SI units, as the scenario parser builds it
// from JSON. Plain structs; validation of ranges happens in the parser, of cross-field fit in MemoryPlan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hwmodels/engine_profile.h"
#include "hwmodels/fabric.h"
#include "hwmodels/gpu_spec.h"
#include "hwmodels/loader.h"
#include "hwmodels/precision.h"
#include "sim/serving/experts/expert_stats.h"
#include "sim/serving/experts/placement.h"
#include "sim/serving/experts/quantization_policy.h"
#include "sim/serving/spec/fault_spec.h"
#include "sim/serving/spec/model_spec.h"
#include "sim/serving/spec/production_spec.h"
#include "workloads/coactivation.h"
#include "workloads/expert_popularity.h"
#include "workloads/popularity_drift.h"
#include "workloads/request_source.h"

namespace moesim {

struct PrecisionSpec {
  Precision routed_experts = Precision::kBF16;
  Precision shared_experts = Precision::kBF16;
  Precision attention = Precision::kBF16;
  Precision dense_ffn = Precision::kBF16;
  Precision router = Precision::kBF16;  // the gating network stays high precision (seed section 5)
  Precision embeddings = Precision::kBF16;
  Precision kv_cache = Precision::kBF16;
  Precision dispatch = Precision::kBF16;  // All-to-All payload of dispatch (FP8 in DeepEP)
  Precision combine = Precision::kBF16;
};

struct ClusterSpec {
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 8;
  FabricSpec fabric;
  [[nodiscard]] int total_gpus() const { return nodes * gpus_per_node; }
};

// KV migration (the seed's dynamic batch balancing): every `check_every`, when the most loaded instance of
// a pool holds more than `imbalance_ratio` x the running requests of the least loaded, running decode
// requests move with their KV cache from the one to the other (deployment.kv_migration).
struct KvMigrationSpec {
  double imbalance_ratio = 0;  // 0: off
  Duration check_every = Duration::from_seconds(1.0);
  int max_requests_per_check = 8;
  [[nodiscard]] bool enabled() const { return imbalance_ratio > 0; }
};

// TensorRT-LLM's attention-DP context balancing (deployment.adp_balance; its runtime flags
// adp_balancing_enable, adp_balancing_batching_wait_iters and adp_balancing_timeout_iters): contexts are held
// until every rank has one, then `batching_wait_iters` iterations more, or at most `timeout_iters`.
struct AdpBalanceSpec {
  bool enabled = false;
  int batching_wait_iters = 0;
  int timeout_iters = 0;
};

// TensorRT-LLM's capacity scheduler policy (executor::CapacitySchedulerPolicy, the LLM API's
// SchedulerConfig.capacity_scheduler_policy; cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp):
// kGuaranteedNoEvict admits a request only when the blocks of its whole prompt and output fit beside what
// every running request may still need; kMaxUtilization admits while this step's blocks fit and pauses the
// newest started request when a running one cannot grow.
enum class CapacitySchedulerPolicy { kGuaranteedNoEvict, kMaxUtilization };

struct DeploymentSpec {
  int ep_size = 8;                         // GPUs per replica; experts are spread over them
  int attention_dp = 8;                    // data-parallel attention groups per replica
  int attention_tp = 1;                    // GPUs per attention group (tensor parallel)
  int max_batch_size = 256;                // sequences per attention group and step (vLLM max_num_seqs)
  std::int64_t max_batched_tokens = 8192;  // tokens per attention group and step
  bool chunked_prefill = true;
  double kv_cache_memory_fraction = 0.9;  // share of HBM usable for weights + activations + KV
  int kv_block_tokens = 16;
  double activation_bytes = 4.0 * (1ULL << 30);
  double framework_overhead_bytes = 2.0 * (1ULL << 30);
  std::int64_t max_waiting_requests = 0;  // per attention group; 0 = unlimited
  AllToAllMode all_to_all_mode = AllToAllMode::kHighThroughput;
  std::string router = "least_loaded";  // a router's name in routers() (router.h)
  // Two-micro-batch overlap: the batch runs as two halves so that one half's All-to-All hides behind
  // the other half's compute (DeepSeek's inference overlap), at the cost of smaller GEMMs.
  bool two_batch_overlap = false;
  // SMs the All-to-All kernels hold throughout while they run beside the other micro-batch's compute; -1:
  // by All-to-All mode (StepPlanner::comm_held_share: 24 SMs for DeepEP normal and NVLink kernels; every SM
  // for 0.06/0.17 of the time for low-latency kernels with the receive hook).
  int comm_sms = -1;
  // Single-batch overlap (SGLang's --enable-single-batch-overlap, low-latency All-to-All only, exclusive with
  // two_batch_overlap): the whole batch's combine runs beside the shared experts (Blackwell) and, where the
  // expert kernel signals per expert, beside the down GEMM; on Hopper the shared experts run while the
  // dispatch is in flight (StepPlanner::single_batch_overlap). comm_sms, when set, is the SMs the combine
  // holds (SGLang's SGLANG_DEEPEP_LL_COMBINE_SEND_NUM_SMS; default 32 on Blackwell, 3 otherwise).
  bool single_batch_overlap = false;
  // The serving engine whose kernels a layer runs (grouped or looped experts, fused small kernels);
  // docs/engines.md.
  EngineProfile engine = engine_profile(EngineKind::kVllm);
  // The scheduler (batch policy) that forms each step's batch: vLLM's, SGLang's or TensorRT-LLM's rules
  // (deployment.scheduler; by default the engine's own, vLLM's for the PyTorch profiles). Apart from
  // `engine`, so that one engine's scheduler can run with another's kernels.
  std::string scheduler = "vllm";  // a scheduler's name in schedulers() (batch_policy.h)
  // Pipeline parallelism: the layers are split into consecutive stages, each on its own EP group of
  // ep_size GPUs; a step's batch flows through them as `pipeline_microbatches` micro-batches.
  int pipeline_stages = 1;
  int pipeline_microbatches = 1;
  // Expert tensor parallelism: each routed expert's matrices are split over `expert_tp` GPUs (column-wise
  // up/gate, row-wise down, Megatron-LM style), whose partial outputs are summed by an all-reduce. The
  // ep_size GPUs form ep_size / expert_tp expert-parallel ranks of expert_tp consecutive GPUs each; vLLM's
  // default for MoE under --tensor-parallel-size 8 is expert_tp 8 (one rank, no All-to-All).
  int expert_tp = 1;
  // Automatic prefix caching (vLLM APC, SGLang RadixAttention): each attention group's KV pool keeps the
  // blocks of computed prompts, reference counted, evicted least recently used; a request skips the prefill
  // of its cached leading blocks. Prompts get block identity from the trace's hash_ids or workload.prefix.
  bool prefix_caching = false;
  KvMigrationSpec kv_migration;
  AdpBalanceSpec adp_balance;  // the trtllm scheduler's, under attention DP
  // The trtllm scheduler's capacity policy (deployment.capacity_scheduler_policy).
  CapacitySchedulerPolicy capacity_policy = CapacitySchedulerPolicy::kGuaranteedNoEvict;
  // TensorRT-LLM's max_input_len (deployment.max_input_len; 0: unbounded): the longest prompt it takes, and
  // under kMaxUtilization the most a paused request keeps of its prompt and generated tokens.
  std::int64_t max_input_len = 0;
  // TensorRT-LLM's attention-DP padding of the MoE input (deployment.moe_dp_padding; NVFP4 routed experts,
  // mid-2025 PyTorch backend: Deepseekv3MoE.compute_routed_output's use_dp_padding): every attention-DP
  // rank's MoE input is padded to the step's largest rank's tokens, and the padded rows are routed,
  // dispatched, computed and combined like real ones (StepPlanner::begin_plan).
  bool moe_dp_padding = false;
  // TensorRT-LLM's CUDA-graph padding (runtime flags cuda_graph_batch_sizes with cuda_graph_padding_enabled;
  // deployment.cuda_graph_batch_sizes, ascending; empty: off): a generation-only step runs the captured
  // graph of the smallest size at least its batch, padded with dummy generation requests
  // (CUDAGraphRunner._get_padded_batch in tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py).
  std::vector<int> cuda_graph_batch_sizes;
  [[nodiscard]] int gpus_per_instance() const { return ep_size * pipeline_stages; }
  [[nodiscard]] int expert_ranks() const { return ep_size / expert_tp; }
  // Layers held by the busiest stage (the memory of a GPU is set by it).
  [[nodiscard]] int max_stage_layers(int layers) const {
    return (layers + pipeline_stages - 1) / pipeline_stages;
  }
};

// A pool of identical serving instances on consecutive GPUs (deployment.pools). kBoth: an instance
// prefills and decodes (the colocated deployment); under disaggregation a request is prefilled in a
// kPrefill pool and decoded in a kDecode pool after its KV cache moved over the fabric.
enum class PoolRole { kBoth, kPrefill, kDecode };

struct PoolSpec {
  PoolRole role = PoolRole::kBoth;
  int instances = 1;
  int first_gpu = 0;  // of the cluster; instance i holds [first_gpu + i x gpus_per_instance, ...)
  DeploymentSpec deployment;
  [[nodiscard]] int gpus() const { return instances * deployment.gpus_per_instance(); }
};

[[nodiscard]] inline const char* to_string(PoolRole r) {
  return r == PoolRole::kPrefill ? "prefill" : r == PoolRole::kDecode ? "decode" : "both";
}

// ---- Operations: the autoscaling planner (deployment.autoscale; autoscaler.h) --------------------------
// Where a new instance's weights come from on scale-up: the NVMe array or host DRAM behind each GPU (the
// expert loaders of hwmodels/loader.h), or a peer GPU that holds them, over NVLink inside its NVLink domain
// or over the network from an active instance of the pool (Fabric::transfer).
enum class WeightSource { kNvme, kHostDram, kPeerNvlink, kPeerNetwork };
[[nodiscard]] inline const char* to_string(WeightSource w) {
  switch (w) {
    case WeightSource::kNvme:
      return "nvme";
    case WeightSource::kHostDram:
      return "host_dram";
    case WeightSource::kPeerNvlink:
      return "peer_nvlink";
    case WeightSource::kPeerNetwork:
      return "peer_network";
  }
  return "nvme";
}

// The load predictor of the planner: the last interval's rate, the mean of the last `window` intervals,
// or Holt's linear (double exponential) smoothing with level weight `alpha` and trend weight `beta`.
enum class PredictorKind { kLast, kMovingAverage, kHolt };
struct PredictorSpec {
  PredictorKind kind = PredictorKind::kLast;
  int window = 3;
  double alpha = 0.5;
  double beta = 0.3;
};

// One pool's bounds under the planner: it runs between min and max instances (max at most the pool's
// `instances`, which are the GPUs it holds in the cluster), starts with `initial` active, and one instance
// serves `capacity_req_per_s` requests per second within the SLA (a figure the scenario gives, e.g. from a
// `--capacity` search of one instance).
struct AutoscalePoolSpec {
  int min_instances = 1;
  int max_instances = 1;
  int initial_instances = 1;
  double capacity_req_per_s = 0;
  // Or per instance in tokens per second of the pool's role (prefill: prompt, decode: output, both: prompt
  // + output), sized into requests by the tokens per request the pool observes finishing.
  double capacity_tokens_per_s = 0;
};

struct AutoscaleSpec {
  bool enabled = false;
  Duration interval = Duration::from_seconds(60.0);
  PredictorSpec predictor;
  int gpu_budget = 0;  // GPUs the active, loading and draining instances may hold together
  WeightSource weights_from = WeightSource::kNvme;
  // Fixed costs of a scale-up after its weights are in: engine start (process, NCCL communicators,
  // expert placement) and CUDA graph capture.
  Duration engine_start;
  Duration cuda_graph_capture;
  double usd_per_gpu_hour = 0;           // 0: no cost in money, GPU-hours only
  std::vector<AutoscalePoolSpec> pools;  // one per pool of ScenarioSpec::pool_specs()
};

struct WorkloadSpec {
  ArrivalSpec arrivals = PoissonArrivals{};
  LengthSpec prompt = FixedLength{512};
  LengthSpec output = FixedLength{128};
  PopularitySpec popularity;
  // Experts in the loop: popularity drift over time and co-activation groups; off by default.
  bool drift = false;
  DriftSpec drift_spec;
  bool coactivation = false;
  CoactivationSpec coactivation_spec;
  // Per-request expert affinity's log-sd (workloads/request_affinity.h); 0: off, each step draws from the
  // population law.
  double request_affinity_sd = 0;
  // Recorded trace (already read by the parser); used instead of arrivals/lengths when not empty.
  std::vector<RequestSpec> trace;
  double trace_speedup = 1.0;
};

struct SlaSpec {
  Duration ttft = Duration::from_seconds(2.0);
  Duration tpot = Duration::from_ms(100.0);
  double percentile = 99.0;
};

// How a run is measured besides its steady window (run.measure): also as MLCommons' loadgen measures an
// MLPerf Server or Offline run, over every query from the cold start (sim/serving/report/loadgen.h).
enum class RunMeasure { kWindow, kMlperfServer, kMlperfOffline };

struct RunSpec {
  std::uint64_t seed = 1;
  RunMeasure measure = RunMeasure::kWindow;
  std::int64_t requests = 0;  // 0 = unlimited (then duration must be set)
  Duration duration;          // arrivals stop after this much simulated time (0 = unlimited)
  Duration warmup;            // the measurement window starts here (when not warmup_auto)
  bool warmup_auto =
      true;            // run.warmup_s "auto" or absent: the window starts where MSER-5 ends the transient
  Duration max_drain;  // stop this long after the last arrival (0 = drain every request)
  // MoE layers a step costs (0: all). A systematic sample of that many layers, drawn afresh each step, each
  // layer's cost weighted by layers / sample (Horvitz-Thompson: the step's expected time is unchanged, its
  // variance grows). For long runs (a production day); refused with experts-in-the-loop mechanisms (their
  // state is per layer) and pipeline stages (their schedule needs every layer).
  int moe_layer_sample = 0;
};

// ---- Experts in the loop (docs/architecture.md; scenario section "experts") ------------------------------
enum class PlacementPolicy { kContiguous, kRoundRobin, kCoactivation, kEplb };

struct RebalanceSpec {
  std::int64_t every_steps = 0;    // rebalance every N steps of a replica (0: never by count)
  double imbalance_threshold = 0;  // or when the mean GPU max/mean of the last check_steps passes it (0: off)
  std::int64_t check_steps = 100;  // window of steps the threshold is checked on
  enum class Cost { kTransfer, kPause };
  Cost cost = Cost::kTransfer;  // moved weights over the fabric (Fabric::transfer), or a fixed pause
  Duration pause;               // the pause, for Cost::kPause
  [[nodiscard]] bool enabled() const { return every_steps > 0 || imbalance_threshold > 0; }
};

struct TiersSpec {
  bool enabled = false;
  double hbm_expert_bytes = 0;                // HBM per GPU for routed expert copies (hot pinned + warm LRU)
  double staging_bytes = 2.0 * (1ULL << 30);  // transient HBM for cold copies streamed in for one batch
  Tier warm_home = Tier::kHostDram;           // where hot and warm copies live when not in HBM
  Tier cold_home = Tier::kNvme;
  int prefetch_window_batches = 8;
  std::int64_t prefetch_threshold = 1;
  bool prefetch = true;
  std::int64_t reclassify_every_steps = 200;  // hot/warm/cold from the EWMA every N steps
  LoaderSpec loader;
};

struct ExpertsSpec {
  PlacementPolicy placement = PlacementPolicy::kContiguous;
  // EPLB: physical slots beyond one per expert, for replicas of hot experts, over the whole EP group
  // (DeepSeek-V3 serves 256 experts in 288 slots: 32 redundant). Legal when routed experts + redundant
  // slots divide by deployment.ep_size; each GPU then holds (experts + redundant) / ep_size slots.
  int redundant_experts = 0;
  int eplb_groups = 1;      // expert groups for the hierarchical EPLB policy
  PartitionSpec partition;  // co-activation placement
  RebalanceSpec rebalance;
  ExpertStatsSpec stats;
  TiersSpec tiers;
  bool quantization = false;  // per-expert precision by hotness (QuantizationSpec)
  QuantizationSpec quant;
  double reroute_threshold = 0;       // router post-processing above threshold x mean per GPU (0: off)
  bool load_aware_admission = false;  // new requests avoid DP ranks whose GPUs were busiest
  // Expert slots on each expert-parallel rank of an EP group of `ranks` ranks (`experts` routed experts);
  // a rank is one GPU, or expert_tp GPUs that each hold 1/expert_tp of every slot's expert.
  [[nodiscard]] int slots_per_gpu(int experts, int ranks) const {
    return (experts + redundant_experts + ranks - 1) / ranks;
  }
  [[nodiscard]] bool needs_stats() const { return rebalance.enabled() || tiers.enabled || quantization; }
  [[nodiscard]] bool any() const {
    return placement != PlacementPolicy::kContiguous || redundant_experts > 0 || needs_stats() ||
           reroute_threshold > 0 || load_aware_admission;
  }
};

struct ScenarioSpec {
  std::string name;
  ModelSpec model;
  PrecisionSpec precision;
  ClusterSpec cluster;
  DeploymentSpec deployment;
  WorkloadSpec workload;
  ExpertsSpec experts;
  SlaSpec sla;
  RunSpec run;
  ProductionSpec production;  // workload.prefix, deployment.speculative, a trace's block keys
  // deployment.pools; empty: one pool of role kBoth with `deployment` over the whole cluster. With pools,
  // `deployment` holds the defaults every pool inherits.
  std::vector<PoolSpec> pools;
  AutoscaleSpec autoscale;  // deployment.autoscale; off unless given
  FaultsSpec faults;        // faults; none unless given
  [[nodiscard]] int gpus_per_replica() const { return deployment.ep_size * deployment.pipeline_stages; }
  [[nodiscard]] int replicas() const { return cluster.total_gpus() / gpus_per_replica(); }
  [[nodiscard]] bool disaggregated() const { return !pools.empty(); }
  // The pools a run builds: `pools`, or the single colocated pool.
  [[nodiscard]] std::vector<PoolSpec> pool_specs() const {
    if (!pools.empty()) return pools;
    return {
        PoolSpec{.role = PoolRole::kBoth, .instances = replicas(), .first_gpu = 0, .deployment = deployment}};
  }
  // The scenario as one pool's instances see it: its deployment, no trace rows (the runtime's source
  // holds them). What the step planner, the batch policy and the memory plan of that pool read.
  [[nodiscard]] ScenarioSpec pool_view(const PoolSpec& p) const {
    ScenarioSpec v;
    v.name = name;
    v.model = model;
    v.precision = precision;
    v.cluster = cluster;
    v.deployment = p.deployment;
    v.workload = workload;
    v.workload.trace.clear();
    v.experts = experts;
    v.faults.spread_copies = faults.spread_copies;  // the expert loop places copies by it
    v.sla = sla;
    v.run = run;
    // What a pool's policy and planner read of the production features (the trace's keys stay here).
    v.production.speculative = production.speculative;
    v.production.prefix = production.prefix;
    return v;
  }
};

}  // namespace moesim
