// Which steps an engine replays as a CUDA graph and which it launches eagerly (the planner costs an eager
// step as hwmodels/eager_launch.h's pipeline).
#pragma once

#include <span>
#include <vector>

#include "hwmodels/engine_profile.h"
#include "sim/serving/step/group_batch.h"

namespace moesim {

// TensorRT-LLM (EngineProfile::eager_mixed_steps; CUDAGraphRunner.maybe_get_cuda_graph in
// tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py): a step runs eagerly when any attention-DP rank runs
// a context (can_run_cuda_graph is false on it). With captured sizes (`sizes`, deployment.
// cuda_graph_batch_sizes, after pad_to_cuda_graph has padded the batches) also when a rank's batch is not
// a captured size (beyond the largest, or not padded) or, under attention DP, the ranks' batch sizes
// differ. Without `sizes` the captured graphs are taken to cover every generation-only batch. Other
// engines: every step as a graph.
[[nodiscard]] bool runs_eagerly(std::span<const GroupBatch> batches, const EngineProfile& e,
                                const std::vector<int>& sizes);

}  // namespace moesim
