#include "hwmodels/engine_profile.h"

#include <algorithm>
#include <array>
#include <utility>

namespace moesim {

namespace {
constexpr std::array<std::pair<EngineKind, std::string_view>, 5> kNames{{
    {EngineKind::kPytorchGraph, "pytorch_graph"},
    {EngineKind::kPytorchLoop, "pytorch_loop"},
    {EngineKind::kVllm, "vllm"},
    {EngineKind::kSglang, "sglang"},
    {EngineKind::kTrtllm, "trtllm"},
}};
// vLLM CustomAllreduce(max_size=8192 * 1024); SGLang's custom all-reduce keeps the same default.
constexpr double kCustomAllReduceMaxBytes = 8.0 * 1024 * 1024;
}  // namespace

AllReduceKernel all_reduce_kernel(const EngineProfile& e, double bytes, int group, bool intra_node) {
  if (!intra_node || group > 8 || group % 2 != 0 || bytes > e.custom_all_reduce_max_bytes)
    return AllReduceKernel::kNccl;
  constexpr double kKiB = 1024;
  const bool one_shot = group == 2 || (group <= 4 && bytes < 512 * kKiB) || bytes < 256 * kKiB;
  return one_shot ? AllReduceKernel::kOneShot : AllReduceKernel::kTwoShot;
}

std::string_view to_string(EngineKind kind) {
  for (const auto& [k, n] : kNames) {
    if (k == kind) return n;
  }
  return "?";
}

std::optional<EngineKind> parse_engine(std::string_view s) {
  for (const auto& [k, n] : kNames) {
    if (n == s) return k;
  }
  return std::nullopt;
}

// Each choice and its source is in docs/engines.md.
EngineProfile engine_profile(EngineKind kind) {
  EngineProfile e{.kind = kind, .name = to_string(kind)};
  switch (kind) {
    case EngineKind::kPytorchGraph:  // shared/calibration/h200/README.md, "Whole-model steps"
      e.rotary = false;
      break;
    case EngineKind::kPytorchLoop:  // the same step with loop_ms's expert loop
      e.experts = ExpertKernel::kPerExpert;
      e.rotary = false;
      break;
    case EngineKind::kVllm:    // fused_moe (Triton), fused_add_rms_norm, topk_softmax, moe_align_block_size
    case EngineKind::kSglang:  // the same kernel set in sgl-kernel (fused_moe Triton / DeepGEMM)
      e.custom_all_reduce_max_bytes = kCustomAllReduceMaxBytes;
      e.fused_add_norm = true;
      e.fused_topk_softmax = true;
      e.fused_align = true;
      e.gather_in_gemm = true;
      e.weight_mul_in_gemm = true;
      e.reduce_unpermute = true;
      // vLLM: fused_moe.py's Triton kernel; SGLang with DeepEP: DeepGEMM grouped GEMMs (docs/engines.md).
      e.expert_family =
          kind == EngineKind::kVllm ? ExpertKernelFamily::kTritonFusedMoe : ExpertKernelFamily::kDeepGemm;
      // SGLang's server_args: DeepSeek V3/R1 on SM100 defaults to --attention-backend trtllm_mla.
      if (kind == EngineKind::kSglang) e.decode_attention = DecodeAttentionKernel::kTrtllmGen;
      break;
    case EngineKind::kTrtllm:  // CUTLASS MoE: expandInputRows permute, finalizeMoeRouting unpermute
      e.custom_all_reduce_max_bytes = kCustomAllReduceMaxBytes;  // AllReduceStrategy AUTO: ONESHOT/TWOSHOT
      e.fused_add_norm = true;
      e.fused_topk_softmax = true;
      e.fused_align = true;
      e.weight_mul_in_gemm = true;
      e.reduce_unpermute = true;
      // TensorRT-LLM launches trtllm-gen for MLA generation on SM100 (attentionOp.h: mUseTllmGen), but its
      // rate as measured in SGLang's GB200 run leaves TensorRT-LLM's own published Blackwell steps 0.07-0.08
      // ms per sequence short, a cost not yet identified (VALIDATION_CLUSTER.md, "The FP8 MLA decode
      // kernel"; not its eager steps either, "Eager steps"). Until it is, this profile keeps the decode fit,
      // which those steps are within 15% of; `trtllm_gen` is the optimistic bound
      // (deployment.decode_attention_kernel).
      e.decode_attention = DecodeAttentionKernel::kFitted;
      // The PyTorch executor's TorchSampler: 13.8 ms of sampling host time per iteration at batch 1,000
      // (TensorRT-LLM PR #11983, before its change; L40S host). The overlap scheduler is on by default
      // (docs/source/torch/features/overlap_scheduler.md; py_executor.py _executor_loop_overlap).
      e.host_us_per_sequence = 13.8;
      // _executor_loop_overlap (py_executor.py): each iteration fetches new requests, schedules step n + 1
      // and launches it, and only then waits for step n's sampled tokens (_update_requests, responses), so
      // step n + 1's batch holds what was queued before step n began; the docs' trade-off ("one extra
      // decoding step", docs/source/features/overlap-scheduler.md) is the other face of it.
      e.schedules_ahead = true;
      // CUDAGraphRunner.maybe_get_cuda_graph (tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py): under
      // attention DP a graph only when every rank is generation-only with the same batch size, and only
      // for a captured size. An eager launch from PyTorch costs 26.3 us of host time on the H200 host
      // (shared/calibration/h200/platform.json, launch.eager_tiny_kernel_us; 1.16 us inside a graph).
      e.eager_mixed_steps = true;
      e.eager_launch_us = 26.3;
      break;
  }
  return e;
}

double exposed_host_s(const EngineProfile& e, double sequences, double gpu_s) {
  const double host_s = e.host_us_per_sequence * 1e-6 * sequences;
  return e.overlap_scheduler ? std::max(0.0, host_s - gpu_s) : host_s;
}

}  // namespace moesim
