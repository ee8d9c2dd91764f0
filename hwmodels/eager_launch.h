// A step launched eagerly (no CUDA graph) as a two-stage pipeline: the host issues the step's kernels one
// after another at a fixed launch cost each, and the GPU runs each kernel once it has been issued and the
// previous one is done. Kernel k (from 1) is issued at k x launch and ends at
// gpu_end(k) = max(gpu_end(k - 1), k x launch) + t_k. A step replayed as a CUDA graph is the GPU time alone.
#pragma once

#include <cstdint>

#include "sim/engine/time.h"

namespace moesim {

class EagerPipeline {
 public:
  explicit EagerPipeline(Duration launch) : launch_(launch) {}
  // Issues `count` kernels of `each` GPU time, one after another. O(1): over a run of equal kernels the
  // recurrence's end is the largest of three terms (see the .cpp).
  void issue(std::int64_t count, Duration each);
  [[nodiscard]] Duration gpu_end() const { return gpu_end_; }
  // When the host has issued the last kernel (kernels x launch).
  [[nodiscard]] Duration host_end() const { return launch_ * issued_; }
  [[nodiscard]] std::int64_t issued() const { return issued_; }

 private:
  Duration launch_;
  Duration gpu_end_ = Duration::zero();
  std::int64_t issued_ = 0;
};

}  // namespace moesim
