// The typed scenario: everything one simulation needs, in SI units, as the scenario parser builds it
// from JSON. Plain structs; validation of ranges happens in the parser, of cross-field fit in MemoryPlan.
#pragma once

#include <cstdint>
#include <string>

#include "hwmodels/fabric.h"
#include "hwmodels/gpu_spec.h"
#include "hwmodels/precision.h"
#include "sim/serving/model_spec.h"
#include "workloads/expert_popularity.h"
#include "workloads/request_source.h"

namespace moesim {

struct PrecisionSpec {
  Precision routed_experts = Precision::kBF16;
  Precision shared_experts = Precision::kBF16;
  Precision attention = Precision::kBF16;
  Precision dense_ffn = Precision::kBF16;
  Precision router = Precision::kBF16;      // the gating network stays high precision (seed section 5)
  Precision embeddings = Precision::kBF16;
  Precision kv_cache = Precision::kBF16;
  Precision dispatch = Precision::kBF16;    // All-to-All payload of dispatch (FP8 in DeepEP)
  Precision combine = Precision::kBF16;
};

struct ClusterSpec {
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 8;
  FabricSpec fabric;
  [[nodiscard]] int total_gpus() const { return nodes * gpus_per_node; }
};

enum class RouterPolicy { kRoundRobin, kLeastLoaded };

struct DeploymentSpec {
  int ep_size = 8;           // GPUs per replica; experts are spread over them
  int attention_dp = 8;      // data-parallel attention groups per replica
  int attention_tp = 1;      // GPUs per attention group (tensor parallel)
  int max_batch_size = 256;  // sequences per attention group and step (vLLM max_num_seqs)
  std::int64_t max_batched_tokens = 8192;  // tokens per attention group and step
  bool chunked_prefill = true;
  double kv_cache_memory_fraction = 0.9;  // share of HBM usable for weights + activations + KV
  int kv_block_tokens = 16;
  double activation_bytes = 4.0 * (1ULL << 30);
  double framework_overhead_bytes = 2.0 * (1ULL << 30);
  std::int64_t max_waiting_requests = 0;  // per attention group; 0 = unlimited
  AllToAllMode all_to_all_mode = AllToAllMode::kHighThroughput;
  RouterPolicy router = RouterPolicy::kLeastLoaded;
};

struct WorkloadSpec {
  ArrivalSpec arrivals = PoissonArrivals{};
  LengthSpec prompt = FixedLength{512};
  LengthSpec output = FixedLength{128};
  PopularitySpec popularity;
  // Recorded trace (already read by the parser); used instead of arrivals/lengths when not empty.
  std::vector<RequestSpec> trace;
  double trace_speedup = 1.0;
};

struct SlaSpec {
  Duration ttft = Duration::from_seconds(2.0);
  Duration tpot = Duration::from_ms(100.0);
  double percentile = 99.0;
};

struct RunSpec {
  std::uint64_t seed = 1;
  std::int64_t requests = 0;      // 0 = unlimited (then duration must be set)
  Duration duration;              // arrivals stop after this much simulated time (0 = unlimited)
  Duration warmup;                // requests arriving earlier are not measured
};

struct ScenarioSpec {
  std::string name;
  ModelSpec model;
  PrecisionSpec precision;
  ClusterSpec cluster;
  DeploymentSpec deployment;
  WorkloadSpec workload;
  SlaSpec sla;
  RunSpec run;
  [[nodiscard]] int replicas() const { return cluster.total_gpus() / deployment.ep_size; }
};

}  // namespace moesim
