// Serving-engine profiles: how an engine runs one layer on one GPU (grouped or looped expert kernels,
// which small kernels it fuses). Pure data; the scenario key deployment.engine picks one, and
// docs/engines.md gives the public source of every choice.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "hwmodels/attention_kernel.h"
#include "hwmodels/expert_kernel_family.h"
#include "hwmodels/fabric_spec.h"

namespace moesim {

enum class EngineKind : std::uint8_t { kPytorchGraph, kPytorchLoop, kVllm, kSglang, kTrtllm };

enum class ExpertKernel : std::uint8_t {
  kGrouped,    // one grouped up GEMM + SwiGLU + one grouped down GEMM per GPU and layer
  kPerExpert,  // one SwiGLU FFN per expert that has tokens (naive loops, offloading paths)
};

struct EngineProfile {
  EngineKind kind = EngineKind::kVllm;
  std::string_view name;
  ExpertKernel experts = ExpertKernel::kGrouped;
  // Which grouped expert kernel (hwmodels/expert_kernel_family.h); deployment.expert_kernel overrides it.
  ExpertKernelFamily expert_family = ExpertKernelFamily::kCutlassGrouped;
  // Which decode-attention kernel (hwmodels/attention_kernel.h); deployment.decode_attention_kernel overrides
  // it.
  DecodeAttentionKernel decode_attention = DecodeAttentionKernel::kFitted;
  bool fused_add_norm = false;      // residual add + RMSNorm in one kernel
  bool fused_topk_softmax = false;  // router top-k and softmax in one kernel
  bool fused_align = false;         // sort by expert, counts and offsets in one kernel
  bool gather_in_gemm = false;      // the grouped up GEMM reads token rows by index (no permute kernel)
  bool weight_mul_in_gemm = false;  // routing weights applied in the grouped down GEMM's epilogue
  bool reduce_unpermute = false;    // unpermute is a gather-sum over top_k rows, not a zeroed scatter-add
  bool rotary = true;               // a rotary-embedding kernel (the measured PyTorch step has none)
  bool cuda_graphs = true;          // decode steps replayed as CUDA graphs
  // Only a step where every attention-DP rank is generation-only, with a batch the captured graphs cover,
  // replays a graph; any other runs eagerly, its kernels issued one by one at `eager_launch_us` each
  // (TensorRT-LLM; sim/serving/step/cuda_graph_step.h). false: every step as a graph (the others: not
  // modelled, docs/engines.md).
  bool eager_mixed_steps = false;
  // Host time to launch one kernel eagerly from PyTorch, in microseconds (eager_mixed_steps only);
  // deployment.eager_launch_us overrides it.
  double eager_launch_us = 0;
  // Largest message the engine's custom NVLink all-reduce takes (one-shot/two-shot, one node, up to 8
  // GPUs); above it, across nodes, or 0: NCCL. vLLM and SGLang CustomAllreduce max_size 8 MiB.
  double custom_all_reduce_max_bytes = 0;
  // Host (CPU) time of the engine's executor per iteration and per sequence that produces a token, in
  // microseconds (TensorRT-LLM: its sampler's, docs/engines.md item 4); 0: not modelled.
  // deployment.host_us_per_sequence overrides it. With `overlap_scheduler` the host prepares the next step
  // while the GPU runs this one (TensorRT-LLM's PyTorch executor, on by default), so only host time beyond
  // the GPU step is exposed.
  double host_us_per_sequence = 0;
  bool overlap_scheduler = true;
  // Whether, under `overlap_scheduler`, the executor forms step n + 1's batch while step n runs, from the
  // requests it fetched when step n began (TensorRT-LLM's PyExecutor._executor_loop_overlap: fetch,
  // schedule and launch step n + 1, then wait for step n's tokens): a request queued after step n began
  // joins step n + 2 at the earliest, one step later than under a loop that forms the batch after step n
  // (see fetches_at_step_start). false: not modelled (vLLM; SGLang's overlap loop not checked).
  bool schedules_ahead = false;
};

// Whether `e`'s executor forms each batch from the requests fetched when the previous step began: its
// overlap scheduler is on and it schedules ahead (the replica then holds back what was queued later).
[[nodiscard]] inline bool fetches_at_step_start(const EngineProfile& e) {
  return e.overlap_scheduler && e.schedules_ahead;
}

// The host time an engine adds to a step whose GPU work takes `gpu_s` seconds, for `sequences` sequences
// that produce a token on the busiest rank (each attention-DP rank runs its own executor): host =
// host_us_per_sequence x sequences; with the overlap scheduler max(0, host - gpu) is exposed (the step
// lasts max(gpu, host)), without it all of host (the step lasts gpu + host).
[[nodiscard]] double exposed_host_s(const EngineProfile& e, double sequences, double gpu_s);

// The all-reduce kernel `e` runs for `bytes` per GPU over `group` GPUs: vLLM's rule
// (csrc/custom_all_reduce.cuh, CustomAllreduce::allreduce): one-shot on 2 GPUs, or below 512 KiB on up to
// 4 GPUs, or below 256 KiB on up to 8; two-shot otherwise; NCCL above the engine's maximum, across
// nodes, or beyond 8 GPUs (the kernels are instantiated for 2, 4, 6 and 8).
[[nodiscard]] AllReduceKernel all_reduce_kernel(const EngineProfile& e, double bytes, int group,
                                                bool intra_node);

[[nodiscard]] EngineProfile engine_profile(EngineKind kind);
[[nodiscard]] std::optional<EngineKind> parse_engine(std::string_view s);
[[nodiscard]] std::string_view to_string(EngineKind kind);

}  // namespace moesim
